//! PLACEHOLDER (replaced by the usdt branch): function parameters from DWARF.
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamType {
    Int { size: u8, signed: bool },
    Pointer { to_char: bool },
    Float,
    Aggregate { size: u64 },
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub ty: ParamType,
    pub type_name: String,
    pub artificial: bool,
}

pub fn function_params(_binary: &Path, _elf_addr: u64) -> Result<Option<Vec<Param>>, String> {
    Ok(None)
}

pub fn abi_register(_params: &[Param], _index: usize) -> Result<&'static str, String> {
    Err("not built".into())
}
