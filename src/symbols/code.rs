//! The machine code of functions, for disassembly (`rprof annotate --asm`).
use super::{elf, DebugSources, ModuleKey, SymbolError};
use crate::addr::ElfAddr;

/// The machine code of a module between two ELF addresses (a function, for disassembly), read from the file
/// the module's process mapped (`path`, else `/proc/PID/root/path`), else from the executable debuginfod has
/// for its build id. A file whose build id is not the recorded one is refused
/// ([`SymbolError::BuildIdMismatch`]), a missing one is [`SymbolError::Io`].
pub fn function_code(
    module: &ModuleKey,
    start: ElfAddr,
    end: ElfAddr,
    sources: &DebugSources,
) -> Result<Vec<u8>, SymbolError> {
    use object::{Object, ObjectSection, ObjectSegment};
    let local = std::iter::once(module.path.clone())
        .chain(
            module
                .path
                .is_absolute()
                .then(|| crate::process::root_path(module.pid, &module.path)),
        )
        .find(|p| p.is_file());
    let recorded = |p: &std::path::Path| match &module.build_id {
        Some(id) => crate::buildid::file_build_id(p).as_ref() == Some(id),
        None => true,
    };
    let fetched = || {
        let client = sources.debuginfod.as_ref()?;
        client.executable(module.build_id.as_deref()?)
    };
    let path = match local {
        Some(path) if recorded(&path) => path,
        local => fetched().or(local).unwrap_or_else(|| module.path.clone()),
    };
    let data = elf::ElfData::read(&path)?;
    let file = data.parse(&path)?;
    if let Some(expected) = &module.build_id {
        if file.build_id().ok().flatten() != Some(expected.as_slice()) {
            return Err(SymbolError::BuildIdMismatch { path });
        }
    }
    let size = end.0.saturating_sub(start.0);
    let corrupt = |reason: String| SymbolError::CorruptElf {
        path: path.clone(),
        reason,
    };
    // The section holding the function, else the loaded segment (files without section headers).
    let bytes = file
        .sections()
        .find(|s| s.address() <= start.0 && start.0 < s.address() + s.size())
        .and_then(|s| s.data_range(start.0, size).ok().flatten())
        .or_else(|| {
            file.segments()
                .find(|s| s.address() <= start.0 && start.0 < s.address() + s.size())
                .and_then(|s| s.data_range(start.0, size).ok().flatten())
        })
        .ok_or_else(|| corrupt(format!("no code at {:#x}..{:#x}", start.0, end.0)))?;
    Ok(bytes.to_vec())
}
