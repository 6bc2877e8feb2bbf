//! Helpers of the symbolization tests (`symbols_elf.rs`, `symbols_dwarf.rs`): building fixtures, modules and
//! file offsets of symbols.
#![allow(dead_code)]
use rprof::addr::FileOffset;
use rprof::symbols::{elf_info, Frame, FunctionSymbol, ModuleKey, SymbolizerOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Run a command and panic with its stderr when it fails.
pub fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Build a fixture with `compiler` and `flags` into `dir/out`.
pub fn build(compiler: &str, source: &str, flags: &[&str], dir: &Path, out: &str) -> PathBuf {
    let exe = dir.join(out);
    run(Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(fixture(source)));
    exe
}

pub fn module(path: &Path) -> ModuleKey {
    let build_id = elf_info(path).unwrap().build_id;
    ModuleKey {
        path: path.to_path_buf(),
        pid: std::process::id(),
        build_id,
    }
}

pub fn symbol<'a>(symbols: &'a [FunctionSymbol], name: &str) -> &'a FunctionSymbol {
    symbols
        .iter()
        .find(|s| s.name == name || s.demangled == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
}

/// The file offset of a symbol's address (plus `delta`).
pub fn offset_of(path: &Path, symbol: &FunctionSymbol, delta: u64) -> FileOffset {
    let info = elf_info(path).unwrap();
    let FileOffset(off) = info
        .layout
        .file_offset(symbol.addr)
        .expect("symbol inside a PT_LOAD segment");
    FileOffset(off + delta)
}

pub fn names(frames: &[Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.name.as_str()).collect()
}

pub fn with_lines() -> SymbolizerOptions {
    SymbolizerOptions {
        lines: true,
        ..SymbolizerOptions::default()
    }
}
