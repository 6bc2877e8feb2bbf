//! Disassembly of one function with iced-x86, spelled as `objdump -d` (binutils 2.40, and so `perf annotate`)
//! spells it: `mov    %rdi,%r9`, `nopw   0x0(%rax,%rax,1)`, `data16 cs nopw 0x0(%rax,%rax,1)`, `rep stos
//! %eax,%es:(%rdi)`, `sar    %eax`, branches as `jne    1238 <divide_loop+0x38>` and rip-relative operands
//! with objdump's comment, `lea    0x2c3e(%rip),%rdi        # 4010 <table>` (labels from [`Labels`]).
//!
//! iced's GNU-as formatter does most of it; what objdump spells otherwise is adjusted here: the prefixes
//! objdump prints as words (`cs`, `ds`, `data16`, `addr32`, `rex.W`: those the instruction does not use),
//! `%es:`/`%ds:` on string operands, the implicit `1` of shifts by one, the `q` suffix of indirect `call`,
//! `jmp` and of `push`/`pop` of memory, and the pseudo-ops (only `cmpXXps` style names, not x87 or imul ones).
use super::labels::Labels;
use iced_x86::{
    Code, Decoder, DecoderOptions, Formatter, GasFormatter, Instruction, Mnemonic, OpKind, Register,
};

/// One decoded instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Its ELF address.
    pub addr: u64,
    pub len: u64,
    /// The instruction as objdump prints it.
    pub text: String,
    /// The target of a direct branch or call.
    pub target: Option<u64>,
}

/// Decode the code that starts at ELF address `start`, naming addresses with `labels`. Bytes that do not
/// decode become `(bad)`, as objdump prints them.
pub fn disassemble(code: &[u8], start: u64, labels: &Labels) -> Vec<Insn> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut formatter = objdump_formatter();
    let mut out = Vec::new();
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        let at = decoder.position();
        let addr = start + at as u64;
        // objdump prints a REX prefix that another prefix follows as an instruction of its own.
        if let Some(rex) = lone_rex(&code[at..]) {
            out.push(Insn {
                addr,
                len: 1,
                text: rex.to_string(),
                target: None,
            });
            decoder.set_position(at + 1).expect("within the code");
            decoder.set_ip(addr + 1);
            continue;
        }
        decoder.decode_out(&mut insn);
        // `fwait` before an x87 control instruction makes one instruction: `fnstcw` becomes `fstcw`.
        let fwait = insn.code() == Code::Wait && waits_for_next(&code[at + 1..]);
        if fwait {
            decoder.decode_out(&mut insn);
        }
        if insn.is_invalid() {
            // objdump's `(bad)` takes the prefixes and the opcode, and decoding goes on after them.
            let len = bad_length(&code[at..]).min(insn.len());
            let mut text: Vec<&str> = code[at..at + len - 1]
                .iter()
                .map(|&b| prefix_name(b))
                .collect();
            text.push("(bad)");
            out.push(Insn {
                addr,
                len: len as u64,
                text: text.join(" "),
                target: None,
            });
            decoder.set_position(at + len).expect("within the code");
            decoder.set_ip(addr + len as u64);
            continue;
        }
        let bytes = &code[at + usize::from(fwait)..decoder.position()];
        let target = match insn.op0_kind() {
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
                Some(insn.near_branch_target())
            }
            _ => None,
        };
        let text = objdump_text(&mut formatter, &insn, bytes, target, labels, fwait);
        out.push(Insn {
            addr,
            len: (decoder.position() - at) as u64,
            text,
            target,
        });
    }
    out
}

/// How many bytes objdump's `(bad)` takes of an instruction that does not decode: its prefixes and its
/// opcode (`0f`, `0f 38` and `0f 3a` escapes included), not its operands.
fn bad_length(code: &[u8]) -> usize {
    let prefixes = code
        .iter()
        .take_while(|&&b| is_legacy_prefix(b) || (0x40..=0x4f).contains(&b))
        .count();
    let opcode = match code[prefixes..] {
        [0x0f, 0x38 | 0x3a, ..] => 3,
        [0x0f, ..] => 2,
        _ => 1,
    };
    (prefixes + opcode).max(1)
}

/// objdump's name of a prefix byte (those of [`is_legacy_prefix`] and REX).
fn prefix_name(b: u8) -> &'static str {
    match b {
        0xf0 => "lock",
        0xf2 => "repnz",
        0xf3 => "repz",
        0x2e => "cs",
        0x36 => "ss",
        0x3e => "ds",
        0x26 => "es",
        0x64 => "fs",
        0x65 => "gs",
        0x66 => "data16",
        0x67 => "addr32",
        _ => REX_NAMES[usize::from(b & 0xf)],
    }
}

/// The name of a REX prefix at the start of `code` that another prefix (or `fwait`) follows.
fn lone_rex(code: &[u8]) -> Option<&'static str> {
    let (&first, &next) = (code.first()?, code.get(1)?);
    let rex = |b: u8| (0x40..=0x4f).contains(&b);
    (rex(first) && (rex(next) || is_legacy_prefix(next) || next == 0x9b))
        .then(|| REX_NAMES[usize::from(first & 0xf)])
}

fn is_legacy_prefix(b: u8) -> bool {
    matches!(
        b,
        0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x66 | 0x67
    )
}

/// Whether the instruction in `code` (after an `fwait`) is an x87 control instruction that objdump merges
/// with it.
fn waits_for_next(code: &[u8]) -> bool {
    let next = Decoder::with_ip(64, code, 0, DecoderOptions::NONE).decode();
    code.first().is_some_and(|b| (0xd8..=0xdf).contains(b))
        && matches!(
            next.mnemonic(),
            Mnemonic::Fnstcw
                | Mnemonic::Fnstsw
                | Mnemonic::Fnstenv
                | Mnemonic::Fnsave
                | Mnemonic::Fnclex
                | Mnemonic::Fninit
                | Mnemonic::Fneni
                | Mnemonic::Fndisi
                | Mnemonic::Fnsetpm
        )
}

/// iced's GNU-as formatter with objdump's spacing and numbers: the mnemonic in a column of 6, then a space;
/// no space after commas; lowercase 0x hex; zero displacements shown; `(%rip)` operands.
fn objdump_formatter() -> GasFormatter {
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_first_operand_char_index(7);
    options.set_space_after_operand_separator(false);
    options.set_uppercase_hex(false);
    options.set_small_hex_numbers_in_decimal(false);
    options.set_show_zero_displacements(true);
    options.set_rip_relative_addresses(true);
    options.set_show_useless_prefixes(false);
    formatter
}

/// One instruction as objdump prints it: the prefixes and the mnemonic, padded to 6 columns, a space, the
/// operands (a branch's target named by `labels`), and for a rip-relative operand, the address it names.
fn objdump_text(
    formatter: &mut GasFormatter,
    insn: &Instruction,
    bytes: &[u8],
    target: Option<u64>,
    labels: &Labels,
    fwait: bool,
) -> String {
    configure(formatter, insn);
    let mut head = prefix_words(insn, bytes).join(" ");
    if !head.is_empty() {
        head.push(' ');
    }
    head.push_str(&mnemonic(formatter, insn, fwait));
    let operands = match target {
        Some(target) => labels.address(target),
        None if is_rax_nop(insn) => String::new(),
        None => operands(formatter, insn, labels),
    };
    match operands.is_empty() {
        true => head,
        false => format!("{head:<6} {operands}"),
    }
}

/// The formatter's options that depend on the instruction.
fn configure(formatter: &mut GasFormatter, insn: &Instruction) {
    let options = formatter.options_mut();
    // objdump writes the scale whenever there is an index, and never a lone comma.
    options.set_always_show_scale(insn.memory_index() != Register::None);
    options.set_always_show_segment_register(has_string_operand(insn));
    options.set_use_pseudo_ops(matches!(
        insn.mnemonic(),
        Mnemonic::Cmpps
            | Mnemonic::Cmppd
            | Mnemonic::Cmpss
            | Mnemonic::Cmpsd
            | Mnemonic::Vcmpps
            | Mnemonic::Vcmppd
            | Mnemonic::Vcmpss
            | Mnemonic::Vcmpsd
            | Mnemonic::Pclmulqdq
            | Mnemonic::Vpclmulqdq
            | Mnemonic::Vpcmpb
            | Mnemonic::Vpcmpub
            | Mnemonic::Vpcmpw
            | Mnemonic::Vpcmpuw
            | Mnemonic::Vpcmpd
            | Mnemonic::Vpcmpud
            | Mnemonic::Vpcmpq
            | Mnemonic::Vpcmpuq
    ));
}

/// The mnemonic with the prefixes iced prints (`lock`, `rep`, `bnd`, `notrack`), spelled as objdump does.
fn mnemonic(formatter: &mut GasFormatter, insn: &Instruction, fwait: bool) -> String {
    if is_rax_nop(insn) {
        return "nop".to_string();
    }
    let mut text = String::new();
    formatter.format_mnemonic(insn, &mut text);
    // No size suffix where 64-bit code has one size: indirect calls and jumps, push and pop of memory, far
    // returns, calls and jumps, iret. `c1 /6` is `shl` to objdump (iced: `sal`).
    for suffixed in [
        "pushq", "popq", "callq", "jmpq", "lretl", "iretl", "lcalll", "ljmpl",
    ] {
        if let Some(head) = text.strip_suffix(suffixed) {
            text = format!("{head}{}", &suffixed[..suffixed.len() - 1]);
        }
    }
    if let Some(head) = text.strip_prefix("sal") {
        text = format!("shl{head}");
    }
    if insn.has_rep_prefix() && !has_string_operand(insn) {
        text = text.replacen("rep ", "repz ", 1);
    }
    text = text
        .replacen("repe ", "repz ", 1)
        .replacen("repne ", "repnz ", 1);
    if fwait {
        text = text.replacen("fn", "f", 1);
    }
    text
}

/// The operands, spelled as objdump does, with the comment of a rip-relative operand.
fn operands(formatter: &mut GasFormatter, insn: &Instruction, labels: &Labels) -> String {
    let mut text = String::new();
    formatter.format_all_operands(insn, &mut text);
    if matches!(
        insn.mnemonic(),
        Mnemonic::In
            | Mnemonic::Out
            | Mnemonic::Insb
            | Mnemonic::Insw
            | Mnemonic::Insd
            | Mnemonic::Outsb
            | Mnemonic::Outsw
            | Mnemonic::Outsd
    ) {
        text = text.replacen("%dx", "(%dx)", 1);
    }
    if shifts_by_one(insn.code()) {
        text = text.replacen("$0x1,", "", 1);
    }
    if insn.mnemonic() == Mnemonic::Xlatb {
        let segment = match insn.segment_prefix() {
            Register::FS => "%fs",
            Register::GS => "%gs",
            _ => "%ds",
        };
        text = format!("{segment}:(%rbx)");
    }
    // 64-bit code ignores cs, ss and es overrides: objdump shows the default %ds on a string source.
    if has_string_source(insn) {
        for ignored in ["%cs:(%", "%ss:(%", "%es:(%rsi", "%es:(%esi"] {
            let with_ds = ignored.replacen(&ignored[..4], "%ds:", 1);
            text = text.replacen(ignored, &with_ds, 1);
        }
    }
    // A SIB byte without an index but with a scale: objdump names the absent index.
    if insn.memory_index() == Register::None && insn.memory_index_scale() > 1 {
        let riz = format!(",%riz,{})", insn.memory_index_scale());
        text = text.replacen(",)", &riz, 1);
    }
    if insn.is_ip_rel_memory_operand() {
        let address = labels.address(insn.ip_rel_memory_address());
        text = format!("{text}        # {address}");
    }
    text
}

/// `D0`/`D1`/`D2`.. forms that shift by an implicit 1 (objdump prints `sar %eax`, not `sar $0x1,%eax`).
fn shifts_by_one(code: Code) -> bool {
    (Code::Rol_rm8_1 as u32..=Code::Sar_rm64_1 as u32).contains(&(code as u32))
}

/// A string instruction that reads from `(%rsi)` (movs, lods, cmps, outs).
fn has_string_source(insn: &Instruction) -> bool {
    (0..insn.op_count()).any(|i| {
        matches!(
            insn.op_kind(i),
            OpKind::MemorySegSI | OpKind::MemorySegESI | OpKind::MemorySegRSI
        )
    })
}

/// A string instruction (`stos`, `movs`, `lods`, `cmps`, `scas`, `ins`, `outs`).
fn has_string_operand(insn: &Instruction) -> bool {
    (0..insn.op_count()).any(|i| {
        matches!(
            insn.op_kind(i),
            OpKind::MemorySegSI
                | OpKind::MemorySegESI
                | OpKind::MemorySegRSI
                | OpKind::MemorySegDI
                | OpKind::MemorySegEDI
                | OpKind::MemorySegRDI
                | OpKind::MemoryESDI
                | OpKind::MemoryESEDI
                | OpKind::MemoryESRDI
        )
    })
}

/// The prefixes objdump prints as words before the mnemonic, in their order in the bytes: segment overrides
/// that 64-bit code ignores (`cs`, `ds`, `es`, `ss`; `fs`/`gs` without a memory operand), and operand-size,
/// address-size and REX prefixes that the instruction does not use (`data16`, `addr32`, `rex.W`). iced
/// prints the rest (`lock`, `rep`, `bnd`, `notrack`) in the mnemonic.
fn prefix_words(insn: &Instruction, bytes: &[u8]) -> Vec<&'static str> {
    let legacy = bytes.iter().take_while(|&&b| is_legacy_prefix(b)).count();
    let rex = bytes.get(legacy).filter(|b| (0x40..=0x4f).contains(*b));
    let has_memory = (0..insn.op_count()).any(|i| insn.op_kind(i) == OpKind::Memory);
    // A string source (`%ds:(%rsi)`) takes any segment prefix, whether 64-bit code honours it or not.
    let source = has_string_source(insn);
    // A prefix is used when the instruction means something else without it.
    let used = |byte: u8| {
        let without = decode_without(insn, bytes, |b, i| b == byte && i < legacy);
        !same_meaning(insn, &without)
    };
    let opsize = bytes[..legacy].iter().filter(|&&b| b == 0x66).count();
    let mut data16 = opsize - usize::from(opsize > 0 && used(0x66));
    let mut words = Vec::new();
    for &b in &bytes[..legacy] {
        let word = match b {
            // On a conditional jump, iced and objdump print these as hints (`je,pn`).
            0x2e | 0x3e if is_conditional_branch(insn) => None,
            0x2e | 0x36 | 0x26 | 0x3e if source => None,
            0x2e => Some("cs"),
            0x36 => Some("ss"),
            0x26 => Some("es"),
            0x3e if insn.segment_prefix() == Register::DS && !is_notrack(insn) => Some("ds"),
            0x64 if !has_memory && !source => Some("fs"),
            0x65 if !has_memory && !source => Some("gs"),
            0x66 if data16 > 0 => {
                data16 -= 1;
                Some("data16")
            }
            0x67 if !used(0x67) => Some("addr32"),
            0xf2 | 0xf3 if !used(b) && !iced_prints_rep(insn) => Some(prefix_name(b)),
            _ => None,
        };
        words.extend(word);
    }
    if let Some(&rex) = rex {
        if !rex_used(insn, bytes, legacy) {
            words.push(REX_NAMES[usize::from(rex & 0xf)]);
        }
    }
    words
}

/// Whether the instruction uses every bit its REX prefix (at `at` in `bytes`) sets, as objdump requires to
/// leave the prefix out: a bit is used when the instruction means something else without it.
fn rex_used(insn: &Instruction, bytes: &[u8], at: usize) -> bool {
    let rex = bytes[at];
    if is_rax_nop(insn) {
        return false;
    }
    let means_same = |replaced: Option<u8>| {
        let mut kept = bytes.to_vec();
        match replaced {
            Some(b) => kept[at] = b,
            None => drop(kept.remove(at)),
        }
        same_meaning(
            insn,
            &Decoder::with_ip(64, &kept, insn.ip(), DecoderOptions::NONE).decode(),
        )
    };
    if rex == 0x40 {
        return !means_same(None);
    }
    [8, 4, 2, 1]
        .iter()
        .filter(|&&bit| rex & bit != 0)
        .all(|&bit| !means_same(Some(rex & !bit)))
}

/// Whether iced prints an F2/F3 prefix itself (`rep`, `repz`, `repnz`, `bnd`, `xacquire`, `xrelease`).
fn iced_prints_rep(insn: &Instruction) -> bool {
    let mut text = String::new();
    GasFormatter::new().format_mnemonic(insn, &mut text);
    ["rep", "bnd", "xacquire", "xrelease"]
        .iter()
        .any(|p| text.contains(p))
}

/// objdump's names of the REX prefixes 0x40..=0x4f.
const REX_NAMES: [&str; 16] = [
    "rex", "rex.B", "rex.X", "rex.XB", "rex.R", "rex.RB", "rex.RX", "rex.RXB", "rex.W", "rex.WB",
    "rex.WX", "rex.WXB", "rex.WR", "rex.WRB", "rex.WRX", "rex.WRXB",
];

/// `48 90`, which objdump reads as a `nop` with an unused REX.W (iced: `nopq`, printed `xchg %rax,%rax`).
fn is_rax_nop(insn: &Instruction) -> bool {
    insn.code() == Code::Nopq
}

/// A direct branch other than `jmp` and `call` (`jcc`, `loop`, `jrcxz`).
fn is_conditional_branch(insn: &Instruction) -> bool {
    matches!(
        insn.op0_kind(),
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
    ) && !matches!(insn.mnemonic(), Mnemonic::Jmp | Mnemonic::Call)
}

/// An indirect branch with a DS prefix, which iced prints as `notrack`.
fn is_notrack(insn: &Instruction) -> bool {
    matches!(insn.mnemonic(), Mnemonic::Jmp | Mnemonic::Call)
        && insn.op0_kind() != OpKind::NearBranch64
}

/// The instruction decoded again from its bytes without those `drop` (byte, index) selects.
fn decode_without(
    insn: &Instruction,
    bytes: &[u8],
    drop: impl Fn(u8, usize) -> bool,
) -> Instruction {
    let kept: Vec<u8> = bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| !drop(b, i))
        .map(|(_, &b)| b)
        .collect();
    Decoder::with_ip(64, &kept, insn.ip(), DecoderOptions::NONE).decode()
}

/// Whether two decodings are the same operation on the same operands (displacements aside, which move with
/// the length of a rip-relative instruction).
fn same_meaning(a: &Instruction, b: &Instruction) -> bool {
    a.code() == b.code()
        && a.op_count() == b.op_count()
        && (0..a.op_count())
            .all(|i| a.op_kind(i) == b.op_kind(i) && a.op_register(i) == b.op_register(i))
        && a.memory_base() == b.memory_base()
        && a.memory_index() == b.memory_index()
        && a.segment_prefix() == b.segment_prefix()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a loop of `xor %edx,%edx; div %rsi; add %r8,%rax; jne back; ret` decodes at its addresses,
    /// in objdump's AT&T spelling, with the branch's target inside the function named as objdump names it.
    #[test]
    fn att_like_objdump() {
        let code = [
            0x31, 0xd2, // xor %edx,%edx
            0x48, 0xf7, 0xf6, // div %rsi
            0x4c, 0x01, 0xc0, // add %r8,%rax
            0x75, 0xf6, // jne 0x1200
            0xc3, // ret
        ];
        let insns = disassemble(&code, 0x1200, &Labels::of_functions(&[(0x1200, "f")]));
        let text: Vec<(u64, &str)> = insns.iter().map(|i| (i.addr, i.text.as_str())).collect();
        assert_eq!(
            text,
            vec![
                (0x1200, "xor    %edx,%edx"),
                (0x1202, "div    %rsi"),
                (0x1205, "add    %r8,%rax"),
                (0x1208, "jne    1200 <f>"),
                (0x120a, "ret"),
            ]
        );
        assert_eq!(insns[3].target, Some(0x1200));
    }

    /// Check the spellings where iced's defaults and objdump differ, each on its bytes.
    #[test]
    fn objdump_spellings() {
        let labels = Labels::of_functions(&[(0x1000, "f"), (0x2000, "table")]);
        let cases: &[(&[u8], &str)] = &[
            (
                &[0x48, 0x8b, 0x84, 0x24, 0x40, 0x01, 0, 0],
                "mov    0x140(%rsp),%rax",
            ),
            (&[0x66, 0x0f, 0x1f, 0x44, 0, 0], "nopw   0x0(%rax,%rax,1)"),
            (
                &[0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
                "data16 cs nopw 0x0(%rax,%rax,1)",
            ),
            (
                &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0],
                "mov    %fs:0x28,%rax",
            ),
            (&[0xf3, 0xab], "rep stos %eax,%es:(%rdi)"),
            (&[0x3e, 0xff, 0xe0], "notrack jmp *%rax"),
            (&[0xd1, 0xf8], "sar    %eax"),
            (&[0xff, 0x74, 0x24, 0x08], "push   0x8(%rsp)"),
            (&[0xff, 0x11], "call   *(%rcx)"),
            (&[0x48, 0x8b, 0x45, 0xf8], "mov    -0x8(%rbp),%rax"),
            (&[0xde, 0xc9], "fmulp  %st,%st(1)"),
            (&[0x6b, 0xc0, 0x0c], "imul   $0xc,%eax,%eax"),
            (
                &[0x48, 0x8d, 0x3d, 0xf9, 0x0f, 0, 0],
                "lea    0xff9(%rip),%rdi        # 2000 <table>",
            ),
            (&[0xe8, 0xfb, 0x0f, 0, 0], "call   2000 <table>"),
        ];
        for (bytes, want) in cases {
            let insns = disassemble(bytes, 0x1000, &labels);
            assert_eq!(insns.len(), 1, "{want}");
            let got: Vec<&str> = insns[0].text.split_whitespace().collect();
            let want: Vec<&str> = want.split_whitespace().collect();
            assert_eq!(got, want);
        }
    }
}
