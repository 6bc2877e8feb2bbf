//! Probes by address, as perf probe takes them: `0xADDR` (perf writes the number into uprobe_events as it is:
//! a file offset of the binary, which is also the ELF address in the code of most PIE binaries) and
//! `FUNC+OFF` (OFF bytes past the start of FUNC). A probe inside a function has no return to time (a return
//! probe there would take a wrong return address): its hits are counted only.
use super::go::GoFunction;
use crate::addr::{ElfAddr, FileOffset};
use crate::probe::target::{Target, TargetKind};
use crate::probe::ProbeError;
use crate::symbols::{elf_info, function_symbols, DebugSources, FunctionSymbol};
use std::path::Path;

/// What an address pattern names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// `0xADDR`: a file offset, as perf's.
    Offset(u64),
    /// `FUNC+OFF`, OFF in decimal or 0x hex.
    InFunction(String, u64),
}

/// The address a pattern names, if it is one.
pub fn parse(pattern: &str) -> Option<Address> {
    let number = |s: &str| match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse::<u64>().ok(),
    };
    if pattern.starts_with("0x") || pattern.starts_with("0X") {
        return number(pattern).map(Address::Offset);
    }
    let (func, off) = pattern.rsplit_once('+')?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "_.:$@".contains(c);
    match func.chars().all(plain) && !func.is_empty() {
        true => number(off).map(|off| Address::InFunction(func.to_string(), off)),
        false => None,
    }
}

/// The one target at `address` in `path`, named as the pattern was written.
pub fn resolve(
    path: &Path,
    pattern: &str,
    address: &Address,
    debug: &DebugSources,
) -> Result<Vec<Target>, ProbeError> {
    let path = std::fs::canonicalize(path).map_err(|error| ProbeError::Binary {
        path: path.to_path_buf(),
        error,
    })?;
    let info = elf_info(&path)?;
    let bad = |reason: String| ProbeError::Spec {
        spec: pattern.to_string(),
        reason,
    };
    let symbols = function_symbols(&path, debug)?;
    let (addr, offset) = match address {
        Address::Offset(off) => {
            let addr = info
                .layout
                .elf_addr(FileOffset(*off))
                .filter(|a| in_code(&info.layout, *a))
                .ok_or_else(|| bad(not_code(&info.layout, *off, &path)))?;
            (addr, FileOffset(*off))
        }
        Address::InFunction(func, off) => {
            let f = function(&symbols, func)
                .ok_or_else(|| bad(format!("no function '{func}' in {}", path.display())))?;
            if *off >= f.size.max(1) {
                return Err(bad(format!(
                    "{func} is {} bytes long: +{off} is past its end",
                    f.size
                )));
            }
            let addr = ElfAddr(f.addr.0 + off);
            let offset = info
                .layout
                .file_offset(addr)
                .ok_or_else(|| bad("not in the file".into()))?;
            if *off == 0 {
                // `FUNC+0` is the function itself: timed as a function.
                return super::resolve::resolve_user(&path, func, false, debug);
            }
            (addr, offset)
        }
    };
    let inside = symbols
        .iter()
        .find(|s| s.addr.0 <= addr.0 && addr.0 < s.addr.0 + s.size.max(1));
    let aliases = inside
        .map(|s| vec![format!("{}+0x{:x}", s.demangled, addr.0 - s.addr.0)])
        .unwrap_or_default();
    if let Some(s) = inside {
        mid_instruction(&path, &info.layout, s, addr).map_err(bad)?;
    }
    let at_start = inside.is_some_and(|s| s.addr == addr);
    if at_start {
        let name = inside.map(|s| s.name.clone()).unwrap_or_default();
        return super::resolve::resolve_user(&path, &name, false, debug);
    }
    Ok(vec![Target {
        name: pattern.to_string(),
        aliases,
        kind: TargetKind::User { path, addr, offset },
        fetches: Vec::new(),
        code: None,
        go: Some(GoFunction::CountOnly(
            "an address inside a function has no return to time".into(),
        )),
        syscall_sites: Vec::new(),
        filter: None,
    }])
}

/// Refuse an address inside an instruction of `func` (decoded from the function's start): a breakpoint there
/// would overwrite part of the instruction and the program would run something else.
fn mid_instruction(
    path: &Path,
    layout: &crate::elf_layout::ElfLayout,
    func: &FunctionSymbol,
    addr: ElfAddr,
) -> Result<(), String> {
    let Ok(file) = crate::mapped::MappedFile::open(path) else {
        return Ok(());
    };
    let Some(body) = layout.file_offset(func.addr).and_then(|o| {
        let start = o.0 as usize;
        file.get(start..start.checked_add(func.size as usize)?)
    }) else {
        return Ok(());
    };
    let off = addr.0 - func.addr.0;
    match super::code::inside_instruction(func.addr.0, body, off) {
        None => Ok(()),
        Some((at, len, text)) => Err(format!(
            "+0x{off:x} is inside the instruction at {name}+0x{at:x} ({text}, {len} bytes), not at the start of \
             one; probe {name}+0x{at:x} or {name}+0x{next:x} (objdump -d shows where instructions start)",
            name = func.demangled,
            next = at + len as u64,
        )),
    }
}

fn function<'a>(symbols: &'a [FunctionSymbol], name: &str) -> Option<&'a FunctionSymbol> {
    symbols.iter().find(|s| s.name == name).or_else(|| {
        symbols
            .iter()
            .find(|s| super::pattern::short_name(&s.name, &s.demangled) == name)
    })
}

fn in_code(layout: &crate::elf_layout::ElfLayout, addr: ElfAddr) -> bool {
    layout
        .segments
        .iter()
        .any(|s| s.executable && addr.0 >= s.vaddr && addr.0 - s.vaddr < s.file_size)
}

/// Why a file offset is no probe point, and the offset of the same number read as an ELF address (as nm and
/// objdump print them) when it is one.
fn not_code(layout: &crate::elf_layout::ElfLayout, off: u64, path: &Path) -> String {
    let as_addr = layout
        .file_offset(ElfAddr(off))
        .filter(|_| in_code(layout, ElfAddr(off)));
    match as_addr {
        Some(o) => format!(
            "0x{off:x} is not a file offset in the code of {} (perf probe's addresses are file offsets); as an \
             ELF address (nm, objdump) it is file offset 0x{:x}: probe 0x{:x}",
            path.display(),
            o.0,
            o.0
        ),
        None => format!(
            "0x{off:x} is not in the code of {} (perf probe's addresses are file offsets)",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_patterns() {
        assert_eq!(parse("0x12e0220"), Some(Address::Offset(0x12e0220)));
        assert_eq!(
            parse("func_d+4"),
            Some(Address::InFunction("func_d".into(), 4))
        );
        assert_eq!(
            parse("func_d+0x10"),
            Some(Address::InFunction("func_d".into(), 16))
        );
        assert_eq!(parse("func_*"), None);
        assert_eq!(parse("a*+4"), None);
        assert_eq!(parse("operator+"), None);
    }
}
