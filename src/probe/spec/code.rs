//! What the machine code of a probed function says about where its probes can go (decoded with iced-x86): its
//! first instructions (what each is to the kernel's uprobe emulation, which registers it writes, whether it
//! branches, moves the stack or writes memory), every offset a direct branch of the function (or of its
//! `.cold` part) lands on, and its `ret` instructions. The decision is [`crate::probe::plan`]'s.
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, Register,
};
use std::collections::BTreeSet;

/// Instructions decoded at the head of a function, at most (the search for a probe point stops before).
const HEAD_MAX: usize = 24;

/// What the kernel does with a probed instruction (x86-64, `arch/x86/kernel/uprobes.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emulation {
    /// `push reg` (50-57, 41 50-57): emulated (Linux 5.?+; checked against the kernel by the plan).
    Push,
    /// `jmp`/`call`/`jcc` with a relative target and no 0x66 prefix: emulated.
    Branch,
    /// `nop` (0x90, with prefixes): emulated.
    Nop,
    /// One of the kernel's own multi-byte nops (`x86_nops[len]`): emulated from Linux 6.16.
    LongNop,
    /// `endbr64`: single-stepped, but always safe to skip.
    Endbr,
    /// Anything else: copied out of line and single-stepped (a second trap).
    Stepped,
}

/// One instruction of a function's head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadInsn {
    /// Offset from the function's start.
    pub offset: u64,
    pub len: u8,
    /// Its mnemonic as objdump prints it (`test`, `je`, `endbr64`).
    pub text: String,
    pub emulation: Emulation,
    /// The general-purpose registers it writes (bit N: register N in [`GPRS`] order).
    pub writes: u16,
    /// It changes control flow (a branch, call, return, syscall, trap).
    pub branches: bool,
    /// It changes `rsp` (and so where `[rsp]`, the return address, is).
    pub moves_stack: bool,
    /// The memory it writes, if any.
    pub stores: Store,
}

/// Where an instruction writes memory (in increasing order of harm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Store {
    None,
    /// Below `rsp` (the red zone), where nothing probed is read.
    BelowStack,
    /// At a fixed address (`rip`-relative or absolute): a global, never the stack; a string a fetch reads
    /// may be there.
    Global,
    /// Through a register: anywhere, `[rsp]` included.
    Anywhere,
}

impl HeadInsn {
    /// An instruction after which nothing can be probed: a branch, a stack move, a store that may reach
    /// `[rsp]`.
    pub fn ends_head(&self) -> bool {
        self.branches || self.moves_stack || self.stores == Store::Anywhere
    }
}

/// The general-purpose registers, in the bit order of [`HeadInsn::writes`], by their tracefs names.
pub const GPRS: [&str; 16] = [
    "ax", "cx", "dx", "bx", "sp", "bp", "si", "di", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15",
];

/// The bit of a tracefs register name (`di`, `r8`) in [`HeadInsn::writes`].
pub fn gpr_bit(name: &str) -> Option<u16> {
    GPRS.iter().position(|r| *r == name).map(|i| 1 << i)
}

/// What a function's code says about probe placement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionCode {
    /// The first instructions, up to the first that emulates or that can never be skipped.
    pub head: Vec<HeadInsn>,
    /// Offsets (from the start) that a direct branch of the function, or of its `.cold` part, lands on.
    pub targets: BTreeSet<u64>,
    /// Offsets of the `ret` instructions.
    pub rets: Vec<u64>,
    /// In a Go function (register ABI), the stack-growth check (`cmp 0x10(%r14),%rsp; jbe morestack`) and the
    /// instructions after it, up to the first that the kernel emulates or that branches.
    pub go: Option<GoHead>,
}

/// What follows a Go function's stack-growth check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GoHead {
    /// Offset of the first instruction after the check's `jbe`.
    pub after_check: u64,
    pub head: Vec<HeadInsn>,
}

/// Analyze the code of a function at ELF address `start` (`body`: its bytes), with the bytes of its `.cold`
/// parts (their ELF addresses and bytes), whose branches back into it count too; `go` for a function of a Go
/// binary.
pub fn analyze(start: u64, body: &[u8], cold: &[(u64, &[u8])], go: bool) -> FunctionCode {
    let mut code = FunctionCode {
        head: head(start, body, 0, true),
        go: go.then(|| go_head(start, body)),
        ..FunctionCode::default()
    };
    let end = start + body.len() as u64;
    for (at, bytes) in std::iter::once((start, body)).chain(cold.iter().copied()) {
        for insn in Decoder::with_ip(64, bytes, at, DecoderOptions::NONE).into_iter() {
            if is_direct_branch(&insn) {
                let t = insn.near_branch_target();
                if (start..end).contains(&t) {
                    code.targets.insert(t - start);
                }
            }
            if at == start && matches!(insn.mnemonic(), Mnemonic::Ret) {
                code.rets.push(insn.ip() - start);
            }
        }
    }
    code
}

/// The stack-growth check of a Go function (`cmp 0x10(%r14),%rsp`, or `lea -N(%rsp),%r12; cmp 0x10(%r14),%r12`
/// for a large frame, then `jbe`; none in a function that never grows the stack), and the head after it (no
/// uretprobe there: stack moves and stores can be skipped; only branches end it).
fn go_head(start: u64, body: &[u8]) -> GoHead {
    let insns: Vec<Instruction> = Decoder::with_ip(64, body, start, DecoderOptions::NONE)
        .into_iter()
        .take(3)
        .collect();
    let check = insns.iter().position(|i| {
        i.mnemonic() == Mnemonic::Cmp
            && i.memory_base() == Register::R14
            && i.memory_displacement64() == 0x10
    });
    let jbe = check.and_then(|at| insns.get(at + 1).filter(|i| i.mnemonic() == Mnemonic::Jbe));
    let after_check = jbe.map_or(0, |j| j.next_ip() - start);
    GoHead {
        after_check,
        head: head(start, body, after_check, false),
    }
}

fn is_direct_branch(insn: &Instruction) -> bool {
    matches!(
        insn.flow_control(),
        FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch | FlowControl::Call
    ) && insn.near_branch_target() != 0
}

/// The instruction of `body` (code at `start`, decoded from its start) that covers offset `off`, as
/// (its offset, its length, its text) when `off` falls inside it rather than at its start; None when `off` starts
/// an instruction (or the decoding stops before it).
pub fn inside_instruction(start: u64, body: &[u8], off: u64) -> Option<(u64, usize, String)> {
    let mut text = String::new();
    let mut formatter = iced_x86::GasFormatter::new();
    for insn in Decoder::with_ip(64, body, start, DecoderOptions::NONE) {
        let at = insn.ip() - start;
        if insn.is_invalid() || at > off {
            return None;
        }
        if at < off && off < at + insn.len() as u64 {
            iced_x86::Formatter::format(&mut formatter, &insn, &mut text);
            return Some((at, insn.len(), text));
        }
        if at == off {
            return None;
        }
    }
    None
}

/// The head from offset `from`: instructions up to and including the first that the kernel emulates or that can
/// never be skipped (a branch, an undecodable byte, and with `uretprobe` a stack move or a store that may reach
/// `[rsp]`), at most [`HEAD_MAX`].
fn head(start: u64, body: &[u8], from: u64, uretprobe: bool) -> Vec<HeadInsn> {
    let mut info = InstructionInfoFactory::new();
    let mut out = Vec::new();
    let Some(rest) = body.get(from as usize..) else {
        return out;
    };
    for insn in Decoder::with_ip(64, rest, start + from, DecoderOptions::NONE)
        .into_iter()
        .take(HEAD_MAX)
    {
        if insn.is_invalid() {
            break;
        }
        let at = (insn.ip() - start) as usize;
        let bytes = &body[at..at + insn.len()];
        let h = describe(&insn, bytes, &mut info, start);
        let ends = if uretprobe { h.ends_head() } else { h.branches };
        let last = h.emulation != Emulation::Stepped && h.emulation != Emulation::Endbr || ends;
        out.push(h);
        if last {
            break;
        }
    }
    out
}

fn describe(
    insn: &Instruction,
    bytes: &[u8],
    info: &mut InstructionInfoFactory,
    start: u64,
) -> HeadInsn {
    let facts = info.info(insn);
    let mut writes = 0u16;
    let mut stack = false;
    for r in facts.used_registers() {
        if !matches!(
            r.access(),
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        ) {
            continue;
        }
        let full = r.register().full_register();
        if full == Register::RSP {
            stack = true;
        }
        if let Some(i) = gpr_index(full) {
            writes |= 1 << i;
        }
    }
    let stores = facts
        .used_memory()
        .iter()
        .filter(|m| {
            matches!(
                m.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            )
        })
        .map(|m| {
            let fixed =
                matches!(m.base(), Register::RIP | Register::None) && m.index() == Register::None;
            let below_sp = m.base() == Register::RSP
                && m.index() == Register::None
                && (m.displacement() as i64) + m.memory_size().size() as i64 <= 0;
            match (fixed, below_sp) {
                (true, _) => Store::Global,
                (_, true) => Store::BelowStack,
                _ => Store::Anywhere,
            }
        })
        .max_by_key(|s| *s as u8)
        .unwrap_or(Store::None);
    HeadInsn {
        offset: insn.ip() - start,
        len: insn.len() as u8,
        text: mnemonic(insn),
        emulation: emulation(insn, bytes),
        writes,
        branches: insn.flow_control() != FlowControl::Next,
        moves_stack: stack || insn.stack_pointer_increment() != 0,
        stores,
    }
}

fn gpr_index(r: Register) -> Option<usize> {
    const ORDER: [Register; 16] = [
        Register::RAX,
        Register::RCX,
        Register::RDX,
        Register::RBX,
        Register::RSP,
        Register::RBP,
        Register::RSI,
        Register::RDI,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];
    ORDER.iter().position(|&o| o == r)
}

/// The kernel's multi-byte nops, `x86_nops[1..=8]` (arch/x86/kernel/alternative.c).
const KERNEL_NOPS: [&[u8]; 8] = [
    &[0x90],
    &[0x66, 0x90],
    &[0x0f, 0x1f, 0x00],
    &[0x0f, 0x1f, 0x40, 0x00],
    &[0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00],
    &[0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00],
    &[0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00],
];

/// How the kernel treats `insn` (whose bytes are `bytes`) when a uprobe is put on it.
fn emulation(insn: &Instruction, bytes: &[u8]) -> Emulation {
    if insn.code() == Code::Endbr64 {
        return Emulation::Endbr;
    }
    if KERNEL_NOPS.contains(&bytes) && bytes != [0x90] {
        return Emulation::LongNop;
    }
    // Legacy prefixes before the opcode (no REX: `41 90` is xchg).
    let opcode_at = bytes
        .iter()
        .position(|b| {
            !matches!(
                b,
                0x66 | 0xf2 | 0xf3 | 0x2e | 0x3e | 0x26 | 0x36 | 0x64 | 0x65 | 0x67
            )
        })
        .unwrap_or(0);
    let (prefixes, rest) = bytes.split_at(opcode_at);
    match rest {
        [0x90] => return Emulation::Nop,
        [0x50..=0x57] if prefixes.is_empty() => return Emulation::Push,
        [0x41, 0x50..=0x57] if prefixes.is_empty() => return Emulation::Push,
        _ => {}
    }
    let relative = matches!(rest.first(), Some(0xeb | 0xe9 | 0xe8 | 0x70..=0x7f))
        || matches!(rest, [0x0f, 0x80..=0x8f, ..]);
    if relative && !prefixes.contains(&0x66) {
        return Emulation::Branch;
    }
    Emulation::Stepped
}

/// The mnemonic as objdump spells it (`je`, `test`, `endbr64`).
fn mnemonic(insn: &Instruction) -> String {
    use iced_x86::{Formatter, GasFormatter};
    let mut f = GasFormatter::new();
    let mut text = String::new();
    f.format_mnemonic(insn, &mut text);
    text.split_whitespace().last().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(bytes: &[u8]) -> Vec<(u64, String, Emulation)> {
        analyze(0x1000, bytes, &[], false)
            .head
            .into_iter()
            .map(|h| (h.offset, h.text, h.emulation))
            .collect()
    }

    /// Check the head of libc's `free` (`test %rdi,%rdi; je`): the test is stepped, writes no register, and the
    /// `je` at +3 is emulated and ends the head.
    #[test]
    fn free_head() {
        let free = [0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00, 0x55];
        let code = analyze(0x1000, &free, &[], false);
        assert_eq!(code.head.len(), 2);
        assert_eq!(
            (code.head[0].text.as_str(), code.head[0].writes),
            ("test", 0)
        );
        assert_eq!(code.head[1].emulation, Emulation::Branch);
        assert_eq!(code.head[1].offset, 3);
        // The je lands past these 10 bytes: outside the function given.
        assert!(code.targets.is_empty());
    }

    /// Check that an offset inside an instruction names that instruction, and one at an instruction's start
    /// none.
    #[test]
    fn inside_instructions() {
        // mov rax,[rip+0x2ec0]; test rdi,rdi; ret
        let body = [0x48, 0x8b, 0x05, 0xc0, 0x2e, 0, 0, 0x48, 0x85, 0xff, 0xc3];
        let (at, len, text) = inside_instruction(0x1000, &body, 4).unwrap();
        assert_eq!((at, len), (0, 7));
        assert!(text.starts_with("mov"), "{text}");
        assert_eq!(inside_instruction(0x1000, &body, 7), None);
        assert_eq!(inside_instruction(0x1000, &body, 10), None);
    }

    /// Check the classes of the usual first instructions.
    #[test]
    fn classes() {
        // endbr64; push %rbp
        assert_eq!(
            head_of(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55]),
            vec![
                (0, "endbr64".into(), Emulation::Endbr),
                (4, "push".into(), Emulation::Push)
            ]
        );
        // push %r12
        assert_eq!(head_of(&[0x41, 0x54])[0].2, Emulation::Push);
        // nopl 0x0(%rax,%rax,1); mov %rdi,%rax
        assert_eq!(
            head_of(&[0x0f, 0x1f, 0x44, 0x00, 0x00])[0].2,
            Emulation::LongNop
        );
        // nop
        assert_eq!(head_of(&[0x90])[0].2, Emulation::Nop);
        // xchg %eax,%r8d is not a nop
        assert_eq!(head_of(&[0x41, 0x90, 0x90])[0].2, Emulation::Stepped);
    }

    /// Check what instructions write: `mov %rdi,%rax` writes rax; `sub $8,%rsp` moves the stack; a store at
    /// `(%rdi)` writes memory, one below rsp does not count.
    #[test]
    fn writes() {
        let code = analyze(
            0x1000,
            &[0x48, 0x89, 0xf8, 0x48, 0x83, 0xec, 0x08],
            &[],
            false,
        );
        assert_eq!(code.head[0].writes, gpr_bit("ax").unwrap());
        assert!(!code.head[0].ends_head());
        assert!(code.head[1].moves_stack);
        let store = |bytes: &[u8]| analyze(0, bytes, &[], false).head[0].stores;
        // mov %rax,(%rdi)
        assert_eq!(store(&[0x48, 0x89, 0x07]), Store::Anywhere);
        // mov %rax,-0x8(%rsp)
        assert_eq!(store(&[0x48, 0x89, 0x44, 0x24, 0xf8]), Store::BelowStack);
        // mov %rax,0x10(%rip)
        assert_eq!(store(&[0x48, 0x89, 0x05, 0x10, 0, 0, 0]), Store::Global);
    }

    /// Check that branches inside the function, and from its cold part back into it, are targets, and rets are
    /// found.
    #[test]
    fn targets_and_rets() {
        // +0 test %rdi,%rdi; +3 jne +0x3 (to +3: a loop back); +5 ret
        let body = [0x48, 0x85, 0xff, 0x75, 0xfe, 0xc3];
        // cold part at 0x2000: jmp 0x1000 + 5
        let cold: [u8; 5] = {
            let rel = (0x1005i64 - (0x2000 + 5)) as i32;
            let b = rel.to_le_bytes();
            [0xe9, b[0], b[1], b[2], b[3]]
        };
        let code = analyze(0x1000, &body, &[(0x2000, &cold)], false);
        assert_eq!(code.targets, BTreeSet::from([3, 5]));
        assert_eq!(code.rets, vec![5]);
    }

    /// Check that a Go function's stack check is found and the head after it goes past stack moves and stores
    /// up to the first emulated instruction (main.sleeper of Go 1.19: the call at +0x19).
    #[test]
    fn go_stack_check() {
        let sleeper = [
            0x49, 0x3b, 0x66, 0x10, // cmp 0x10(%r14),%rsp
            0x76, 0x22, // jbe
            0x48, 0x83, 0xec, 0x10, // sub $0x10,%rsp
            0x48, 0x89, 0x6c, 0x24, 0x08, // mov %rbp,0x8(%rsp)
            0x48, 0x8d, 0x6c, 0x24, 0x08, // lea 0x8(%rsp),%rbp
            0xb8, 0x40, 0x42, 0x0f, 0x00, // mov $0xf4240,%eax
            0xe8, 0x00, 0x00, 0x00, 0x00, // call
            0xc3,
        ];
        let code = analyze(0x1000, &sleeper, &[], true);
        let go = code.go.unwrap();
        assert_eq!(go.after_check, 6);
        let last = go.head.last().unwrap();
        assert_eq!((last.offset, last.emulation), (0x19, Emulation::Branch));
        assert_eq!(code.rets, vec![0x1e]);
        let nosplit = analyze(0x1000, &[0x48, 0xd1, 0xe0, 0xc3], &[], true)
            .go
            .unwrap();
        assert_eq!((nosplit.after_check, nosplit.head.len()), (0, 2));
        assert!(analyze(0x1000, &[0x48, 0xd1, 0xe0, 0xc3], &[], false)
            .go
            .is_none());
    }
}
