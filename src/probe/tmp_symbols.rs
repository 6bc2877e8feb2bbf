//! TEMPORARY stand-in for `crate::symbols::{elf_info, function_symbols, demangle}` until the symbols branch
//! lands. DELETE THIS FILE then, and call the `symbols::` functions directly (see `probe::resolve`).
use crate::addr::ElfAddr;
use crate::symbols::{ElfInfo, FunctionSymbol, LoadSegment, SymbolError};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::path::{Path, PathBuf};

fn read(path: &Path) -> Result<Vec<u8>, SymbolError> {
    std::fs::read(path).map_err(|source| SymbolError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse<'a>(path: &Path, data: &'a [u8]) -> Result<object::File<'a>, SymbolError> {
    object::File::parse(data).map_err(|e| SymbolError::NotElf {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Stand-in for `symbols::elf_info`.
pub fn elf_info(path: &Path) -> Result<ElfInfo, SymbolError> {
    let data = read(path)?;
    let file = parse(path, &data)?;
    let segments = file
        .segments()
        .map(|s| {
            let (offset, filesz) = s.file_range();
            let executable =
                matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & 1 != 0);
            LoadSegment {
                vaddr: s.address(),
                offset,
                filesz,
                memsz: s.size(),
                executable,
            }
        })
        .collect();
    Ok(ElfInfo {
        build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
        segments,
        is_go: file.section_by_name(".go.buildinfo").is_some(),
    })
}

/// Stand-in for `symbols::demangle`.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = s.demangle() {
                return d;
            }
        }
    }
    name.to_string()
}

/// Stand-in for `symbols::function_symbols` (no separate debug files).
pub fn function_symbols(
    path: &Path,
    _debug_dirs: &[PathBuf],
) -> Result<Vec<FunctionSymbol>, SymbolError> {
    let data = read(path)?;
    let file = parse(path, &data)?;
    let mut out = Vec::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if sym.kind() != SymbolKind::Text || !sym.is_definition() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        out.push(FunctionSymbol {
            name: name.to_string(),
            demangled: demangle(name),
            addr: ElfAddr(sym.address()),
            size: sym.size(),
        });
    }
    if out.is_empty() {
        return Err(SymbolError::NoSymbols {
            path: path.to_path_buf(),
            searched: "nowhere (temporary)".into(),
        });
    }
    Ok(out)
}
