//! Disassembly of one function with iced-x86, in AT&T syntax as objdump (and so `perf annotate`) prints it:
//! `mov    %rdi,%r9`, branches as `jne    1238 <divide_loop+0x38>`.
use iced_x86::{Decoder, DecoderOptions, Formatter, GasFormatter, Instruction, OpKind};

/// One decoded instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Its ELF address.
    pub addr: u64,
    pub len: u64,
    /// The instruction as text.
    pub text: String,
    /// The target of a direct branch or call.
    pub target: Option<u64>,
}

/// Decode the code of function `name` that starts at ELF address `start`. Bytes that do not decode become
/// `(bad)`, as objdump prints them.
pub fn disassemble(code: &[u8], start: u64, name: &str) -> Vec<Insn> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    // objdump's spacing: the mnemonic in a column of 6, then a space; no space after commas; 0x immediates.
    options.set_first_operand_char_index(7);
    options.set_space_after_operand_separator(false);
    options.set_uppercase_hex(false);
    options.set_small_hex_numbers_in_decimal(false);
    options.set_always_show_scale(true);
    options.set_show_zero_displacements(true);
    let end = start + code.len() as u64;
    let mut out = Vec::new();
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        let addr = instruction.ip();
        let target = match instruction.op0_kind() {
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
                Some(instruction.near_branch_target())
            }
            _ => None,
        };
        let mut text = String::new();
        if instruction.is_invalid() {
            text.push_str("(bad)");
        } else if let Some(target) = target {
            formatter.format_mnemonic(&instruction, &mut text);
            let label = match target {
                t if t == start => format!(" <{name}>"),
                t if (start..end).contains(&t) => format!(" <{name}+{:#x}>", t - start),
                _ => String::new(),
            };
            text = format!("{text:<6} {target:x}{label}");
        } else {
            formatter.format(&instruction, &mut text);
        }
        out.push(Insn {
            addr,
            len: instruction.len() as u64,
            text,
            target,
        });
    }
    out
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
        let insns = disassemble(&code, 0x1200, "f");
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
}
