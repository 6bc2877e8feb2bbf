//! The `<symbol+0xoffset>` labels of a disassembly, chosen as objdump chooses them (binutils 2.40
//! `find_symbol_for_address`), so that `rprof annotate --asm` prints branch targets and rip-relative operands
//! as `objdump -d` (and so `perf annotate`) does:
//!
//! - The symbols are the binary's `.symtab`, or its `.dynsym` when it has none (then named with their versions,
//!   `memcpy@@GLIBC_2.14`, `Perl_runops_standard@@Base`), without section, file and undefined symbols, plus a
//!   synthetic `NAME@plt` per PLT entry (`*ABS*+0xADDEND@plt` for IFUNC slots).
//! - They are sorted by value, then: in the disassembled section first, functions, then objects, then global
//!   before local symbols, larger first, and by name.
//! - An address takes the last symbol at or below it (the first of those sharing its value), one in the
//!   disassembled section if any. Otherwise, when a dynamic relocation with a symbol applies at the address,
//!   it takes the relocation's symbol: a GOT slot reads `<chmod@GLIBC_2.2.5>`.
use object::elf;
use object::read::elf::{FileHeader, Rela, SectionHeader, SectionTable, Sym, SymbolTable};
use object::{LittleEndian as LE, SectionIndex, SymbolIndex};
use std::cmp::Ordering;

type Elf = elf::FileHeader64<LE>;

/// One symbol as objdump's sorted table holds it.
#[derive(Clone, Debug, Default)]
struct Label {
    value: u64,
    /// The name, without its version.
    name: String,
    /// `@@VERSION`, `@VERSION` or empty.
    version: String,
    /// It lies in the section being disassembled (by name, as objdump compares them).
    in_section: bool,
    function: bool,
    object: bool,
    local: bool,
    global: bool,
    size: u64,
    /// A PLT entry's name (objdump's synthetic symbols, which skip the relocation lookup).
    synthetic: bool,
    /// Undefined (a relocation's symbol): printed without an offset.
    undefined: bool,
}

/// The labels of one binary's addresses, for the disassembly of one of its sections.
#[derive(Clone, Debug, Default)]
pub struct Labels {
    /// In objdump's order (see the module documentation).
    labels: Vec<Label>,
    /// Dynamic relocations: (address, symbol), by address; None for relocations without a symbol.
    relocs: Vec<(u64, Option<Label>)>,
}

impl Labels {
    /// Labels from plain (address, name) pairs, as in a binary with only these function symbols.
    pub fn of_functions(functions: &[(u64, &str)]) -> Labels {
        let labels = functions
            .iter()
            .map(|&(value, name)| Label {
                value,
                name: name.to_string(),
                in_section: true,
                function: true,
                global: true,
                ..Label::default()
            })
            .collect();
        Labels::sorted(labels, Vec::new())
    }

    /// The labels of an ELF file for the disassembly of the section holding `addr`. A file that is not a
    /// 64-bit little-endian ELF file has none.
    pub fn of_elf(data: &[u8], addr: u64) -> Labels {
        read_elf(data, addr).unwrap_or_default()
    }

    fn sorted(mut labels: Vec<Label>, mut relocs: Vec<(u64, Option<Label>)>) -> Labels {
        labels.sort_by(objdump_order);
        relocs.sort_by_key(|r| r.0);
        Labels { labels, relocs }
    }

    /// `addr` as objdump prints an address operand: `1238 <divide_loop+0x38>`, or `0x1238` in a binary
    /// without symbols.
    pub fn address(&self, addr: u64) -> String {
        let Some(label) = self.find(addr) else {
            return format!("{addr:#x}");
        };
        let offset = match label.value.cmp(&addr) {
            _ if label.undefined => String::new(),
            Ordering::Equal => String::new(),
            Ordering::Greater => format!("-{:#x}", label.value - addr),
            Ordering::Less => format!("+{:#x}", addr - label.value),
        };
        format!("{addr:x} <{}{}{offset}>", label.name, label.version)
    }

    /// objdump's `find_symbol_for_address` for an executable or shared object.
    fn find(&self, addr: u64) -> Option<&Label> {
        let below = self.labels.partition_point(|l| l.value <= addr);
        let mut place = below.saturating_sub(1);
        let value = self.labels.get(place)?.value;
        while place > 0 && self.labels[place - 1].value == value {
            place -= 1;
        }
        let equal = self.labels[place..].iter().take_while(|l| l.value == value);
        if let Some(label) = equal.clone().find(|l| l.in_section) {
            return Some(label);
        }
        let label = &self.labels[place];
        if !label.synthetic {
            let at = self.relocs.partition_point(|r| r.0 < addr);
            let reloc = self.relocs[at..].iter().take_while(|r| r.0 == addr);
            if let Some(sym) = reloc.filter_map(|r| r.1.as_ref()).next() {
                return Some(sym);
            }
        }
        Some(label)
    }
}

/// binutils' `compare_symbols`, for symbols that survive `remove_useless_symbols`.
fn objdump_order(a: &Label, b: &Label) -> Ordering {
    let compiled = |l: &Label| l.name.contains("gnu_compiled") || l.name.contains("gcc2_compiled");
    let file = |l: &Label| l.name.len() > 2 && (l.name.ends_with(".o") || l.name.ends_with(".a"));
    let dot = |l: &Label| l.name.starts_with('.');
    a.value
        .cmp(&b.value)
        .then(b.in_section.cmp(&a.in_section))
        .then(compiled(a).cmp(&compiled(b)))
        .then(file(a).cmp(&file(b)))
        .then(b.function.cmp(&a.function))
        .then(b.object.cmp(&a.object))
        .then(a.local.cmp(&b.local))
        .then(b.global.cmp(&a.global))
        .then(b.size.cmp(&a.size))
        .then(dot(a).cmp(&dot(b)))
        .then_with(|| a.name.as_bytes().cmp(b.name.as_bytes()))
}

/// The symbol tables, versions and section names of one ELF file.
struct ElfSymbols<'data> {
    sections: SectionTable<'data, Elf>,
    data: &'data [u8],
    /// The name of the section being disassembled.
    code_section: Vec<u8>,
}

fn read_elf(data: &[u8], addr: u64) -> Option<Labels> {
    let header = Elf::parse(data).ok()?;
    let sections = header.sections(LE, data).ok()?;
    let code = sections.iter().find(|s| {
        s.sh_type(LE) == elf::SHT_PROGBITS
            && (s.sh_addr(LE)..s.sh_addr(LE) + s.sh_size(LE)).contains(&addr)
    })?;
    let file = ElfSymbols {
        code_section: sections.section_name(LE, code).ok()?.to_vec(),
        sections,
        data,
    };
    let symtab = file.sections.symbols(LE, data, elf::SHT_SYMTAB).ok()?;
    let dynsym = file.sections.symbols(LE, data, elf::SHT_DYNSYM).ok()?;
    let versions = file.sections.versions(LE, data).ok().flatten();
    let dynamic = |index: SymbolIndex| file.label(&dynsym, index, versions.as_ref());
    let mut labels: Vec<Label> = match symtab.is_empty() {
        false => (1..symtab.len())
            .filter_map(|i| file.label(&symtab, SymbolIndex(i), None))
            .collect(),
        true => (1..dynsym.len())
            .filter_map(|i| dynamic(SymbolIndex(i)))
            .collect(),
    };
    labels.retain(|l| !l.undefined && !l.name.is_empty());
    let relocs = file.dynamic_relocs(&dynsym, &dynamic);
    labels.extend(file.plt_labels(&relocs));
    Some(Labels::sorted(
        labels,
        relocs.into_iter().map(|r| (r.0, r.1)).collect(),
    ))
}

impl<'data> ElfSymbols<'data> {
    /// A symbol as objdump reads it, None for section and file symbols and common ones.
    fn label(
        &self,
        table: &SymbolTable<'data, Elf>,
        index: SymbolIndex,
        versions: Option<&object::read::elf::VersionTable<'data, Elf>>,
    ) -> Option<Label> {
        let sym = table.symbol(index).ok()?;
        let kind = sym.st_type();
        if matches!(kind, elf::STT_SECTION | elf::STT_FILE) {
            return None;
        }
        let shndx = sym.st_shndx(LE);
        if shndx == elf::SHN_COMMON {
            return None;
        }
        let undefined = shndx == elf::SHN_UNDEF;
        let in_section = !undefined
            && shndx < elf::SHN_LORESERVE
            && self
                .sections
                .section(SectionIndex(usize::from(shndx)))
                .and_then(|s| self.sections.section_name(LE, s))
                .is_ok_and(|name| name == self.code_section);
        let bind = sym.st_bind();
        Some(Label {
            value: sym.st_value(LE),
            name: String::from_utf8_lossy(table.symbol_name(LE, sym).ok()?).into_owned(),
            version: versions.map_or(String::new(), |v| version(v, index, undefined)),
            in_section,
            function: kind == elf::STT_FUNC,
            object: matches!(kind, elf::STT_OBJECT | elf::STT_COMMON),
            local: bind == elf::STB_LOCAL,
            global: bind == elf::STB_GLOBAL && !undefined,
            size: sym.st_size(LE),
            synthetic: false,
            undefined,
        })
    }

    /// The relocations of the dynamic symbol table's relocation sections: (address, symbol, type, addend).
    fn dynamic_relocs(
        &self,
        dynsym: &SymbolTable<'data, Elf>,
        label: &dyn Fn(SymbolIndex) -> Option<Label>,
    ) -> Vec<(u64, Option<Label>, u32, i64)> {
        let mut relocs = Vec::new();
        for section in self.sections.iter() {
            let linked = section.sh_link(LE) as usize == dynsym.section().0;
            if section.sh_type(LE) != elf::SHT_RELA || !linked {
                continue;
            }
            let Ok(rows) = section.data_as_array::<elf::Rela64<LE>, _>(LE, self.data) else {
                continue;
            };
            for r in rows {
                let sym = r.r_sym(LE, false) as usize;
                let symbol = (sym != 0).then(|| label(SymbolIndex(sym))).flatten();
                relocs.push((r.r_offset(LE), symbol, r.r_type(LE, false), r.r_addend(LE)));
            }
        }
        relocs.sort_by_key(|r| r.0);
        relocs
    }

    /// objdump's synthetic `NAME@plt` symbols: each PLT entry that jumps through a GOT slot with a
    /// JUMP_SLOT, GLOB_DAT, IRELATIVE or TLSDESC relocation.
    fn plt_labels(&self, relocs: &[(u64, Option<Label>, u32, i64)]) -> Vec<Label> {
        let mut labels = Vec::new();
        for section in self.sections.iter() {
            let name = self.sections.section_name(LE, section).unwrap_or_default();
            if !matches!(name, b".plt" | b".plt.sec" | b".plt.got") {
                continue;
            }
            let Ok(bytes) = section.data(LE, self.data) else {
                continue;
            };
            let size = match section.sh_entsize(LE) {
                0 => 16,
                n => n as usize,
            };
            let base = section.sh_addr(LE);
            for (i, entry) in bytes.chunks_exact(size).enumerate() {
                let at = base + (i * size) as u64;
                let Some(slot) = got_slot(entry, at) else {
                    continue;
                };
                let first = relocs.partition_point(|r| r.0 < slot);
                let Some((_, sym, kind, addend)) = relocs.get(first).filter(|r| r.0 == slot) else {
                    continue;
                };
                let slot_kinds = [
                    elf::R_X86_64_JUMP_SLOT,
                    elf::R_X86_64_GLOB_DAT,
                    elf::R_X86_64_IRELATIVE,
                    elf::R_X86_64_TLSDESC,
                ];
                if !slot_kinds.contains(kind) {
                    continue;
                }
                let mut name = sym.as_ref().map_or("*ABS*".into(), |s| s.name.clone());
                if *addend != 0 {
                    name.push_str(&format!("+{addend:#x}"));
                }
                name.push_str("@plt");
                labels.push(Label {
                    value: at,
                    name,
                    local: sym.as_ref().is_some_and(|s| s.local),
                    global: !sym.as_ref().is_some_and(|s| s.local),
                    function: sym.as_ref().is_some_and(|s| s.function),
                    object: sym.as_ref().is_some_and(|s| s.object),
                    synthetic: true,
                    ..Label::default()
                });
            }
        }
        labels
    }
}

/// The GOT slot a PLT entry at `at` jumps through: `[endbr64] [bnd] jmp *DISP(%rip)`.
fn got_slot(entry: &[u8], at: u64) -> Option<u64> {
    let mut i = 0;
    if entry.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        i += 4;
    }
    if entry.get(i) == Some(&0xf2) {
        i += 1;
    }
    if entry.get(i..i + 2) != Some(&[0xff, 0x25]) {
        return None;
    }
    let disp = i32::from_le_bytes(entry.get(i + 2..i + 6)?.try_into().ok()?);
    Some((at + i as u64 + 6).wrapping_add_signed(i64::from(disp)))
}

/// A dynamic symbol's version as objdump prints it: `@@VERSION` for a default version, `@VERSION` for a
/// hidden one or a reference, `@@Base` for the base version, nothing for a local one.
fn version(
    versions: &object::read::elf::VersionTable<'_, Elf>,
    index: SymbolIndex,
    undefined: bool,
) -> String {
    let v = versions.version_index(LE, index);
    let name = match v.index() & elf::VERSYM_VERSION {
        0 => return String::new(),
        1 => "Base".to_string(),
        _ => match versions.version(v) {
            Ok(Some(version)) => String::from_utf8_lossy(version.name()).into_owned(),
            _ => "<corrupt>".to_string(),
        },
    };
    let reference = matches!(versions.version(v), Ok(Some(version)) if version.file().is_some());
    match v.is_hidden() || undefined || reference {
        true => format!("@{name}"),
        false => format!("@@{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check objdump's choices: the nearest symbol at or below, `+0x` offsets, the in-section symbol among
    /// aliases, a function before an object at one address, and an address below every symbol.
    #[test]
    fn nearest_symbol_as_objdump() {
        let mut labels = vec![
            Label {
                value: 0x1000,
                name: "data".into(),
                object: true,
                ..Label::default()
            },
            Label {
                value: 0x1000,
                name: "func".into(),
                function: true,
                in_section: true,
                ..Label::default()
            },
            Label {
                value: 0x2000,
                name: "zeta".into(),
                object: true,
                global: true,
                ..Label::default()
            },
            Label {
                value: 0x2000,
                name: "alpha".into(),
                function: true,
                ..Label::default()
            },
        ];
        labels.reverse();
        let labels = Labels::sorted(labels, Vec::new());
        assert_eq!(labels.address(0x1000), "1000 <func>");
        assert_eq!(labels.address(0x1010), "1010 <func+0x10>");
        assert_eq!(labels.address(0x2004), "2004 <alpha+0x4>");
        assert_eq!(labels.address(0x10), "10 <func-0xff0>");
        assert_eq!(Labels::default().address(0x10), "0x10");
    }
}
