//! Function parameters from DWARF, and the x86-64 SysV register each integer parameter arrives in: what a
//! uprobe at a function's entry can fetch (`%di`, `%si`…) and how to show it (`+0(%si):string` for a
//! `const char *`).
//!
//! The DWARF is the binary's own or its separate debug file's (build id, `.gnu_debuglink`).
use super::debugfile::{find_debug_file, DebugHints};
use super::dies::{DieRef, Dies};
use super::elf::{has_dwarf, ElfData};
use super::{DebugSources, SymbolError};
use gimli::{AttributeValue, UnitOffset};
use object::{Object, ObjectSection};
use std::borrow::Cow;
use std::path::Path;

/// A parameter's type, as far as fetching it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// Integers, enums, bool (size 1), characters.
    Int {
        size: u8,
        signed: bool,
    },
    /// Pointers and C++ references; `to_char` when it points to `char`, `signed char` or `unsigned char`
    /// (maybe const or through typedefs): a string.
    Pointer {
        to_char: bool,
    },
    /// `float`, `double`, `long double`, complex: passed in xmm registers or memory.
    Float,
    /// A struct, union, class or array passed by value.
    Aggregate {
        size: u64,
    },
    Unknown,
}

/// Text a parameter holds or points to, as `:str` reads it (from what its type is, after typedefs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Text {
    /// A pointer to characters (`const char *`): a NUL-terminated string.
    Chars,
    /// The address of a libstdc++ `std::string` (`std::basic_string<char>`): a pointer or reference to one,
    /// or one passed by value (by invisible reference).
    StringAt,
    /// The address of a libstdc++ `std::string_view` (`std::basic_string_view<char>`).
    StringViewAt,
    /// A libstdc++ `std::string_view` passed by value: its length and its data pointer in two registers.
    StringView,
}

/// One formal parameter of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ty: ParamType,
    /// What `:str` reads, when the parameter is text; None for other types.
    pub text: Option<Text>,
    /// The C spelling of the type: `const char *`, `size_t`, `struct big`.
    pub type_name: String,
    /// Passed by the compiler, not written in the source: C++'s `this`, and the hidden pointer to the
    /// return value of a function returning a large struct (named `<return slot>`, always first).
    pub artificial: bool,
}

/// The SysV x86-64 integer argument registers, by tracefs name, in order.
const INT_REGS: [&str; 6] = ["di", "si", "dx", "cx", "r8", "r9"];

/// The integer register (tracefs name) parameter `index` of `params` arrives in, per the SysV x86-64 ABI:
/// integers and pointers take the next of rdi, rsi, rdx, rcx, r8, r9; floating-point parameters go to xmm
/// registers and structs larger than 16 bytes to memory, and neither takes an integer register.
pub fn abi_register(params: &[Param], index: usize) -> Result<&'static str, String> {
    let param = params.get(index).ok_or_else(|| {
        format!(
            "the function has {} parameters, not {}",
            params.len(),
            index + 1
        )
    })?;
    let what = format!("parameter {index} (`{}`, {})", param.name, param.type_name);
    let mut used = 0usize;
    for (i, p) in params[..index].iter().enumerate() {
        match &p.ty {
            ParamType::Float => {}
            ParamType::Aggregate { .. } if p.text == Some(Text::StringView) => used += 2,
            ParamType::Aggregate { size } if *size > 16 => {}
            ParamType::Aggregate { .. } => {
                return Err(format!(
                    "{what} follows parameter {i} (`{}`), a struct of at most 16 bytes passed in \
                     registers, whose register use is not computed: not supported",
                    p.name
                ))
            }
            ParamType::Int { size, .. } if *size > 8 => used += 2,
            ParamType::Unknown => {
                return Err(format!(
                "{what} follows parameter {i} (`{}`), whose type ({}) is not known well enough to \
                     tell its registers",
                p.name, p.type_name
            ))
            }
            _ => used += 1,
        }
    }
    match &param.ty {
        // Two integer eightbytes: both in registers, or the whole view on the stack.
        ParamType::Aggregate { .. } if param.text == Some(Text::StringView) && used + 2 > INT_REGS.len() => {
            Err(format!("{what} is past the 6 integer argument registers (rdi, rsi, rdx, rcx, r8, r9): it is on the stack"))
        }
        ParamType::Aggregate { .. } if param.text == Some(Text::StringView) => Ok(INT_REGS[used]),
        ParamType::Float => Err(format!(
            "{what} is a floating-point parameter (passed in xmm registers; not supported)"
        )),
        ParamType::Aggregate { size } if *size > 16 => Err(format!("{what} is a struct passed in memory")),
        ParamType::Aggregate { .. } => Err(format!("{what} is a struct: not supported")),
        ParamType::Unknown => Err(format!("{what} has a type rprof cannot read")),
        ParamType::Int { size, .. } if *size > 8 => {
            Err(format!("{what} is a {}-bit integer: not supported", u32::from(*size) * 8))
        }
        _ => INT_REGS.get(used).copied().ok_or_else(|| {
            format!(
                "{what} is past the 6 integer argument registers (rdi, rsi, rdx, rcx, r8, r9): it is on the stack"
            )
        }),
    }
}

/// The parameters of the function whose code starts at ELF address `elf_addr` in `binary`, in order, from its
/// DWARF or its separate debug file under `/usr/lib/debug`. None when no DWARF describes a function there.
pub fn function_params(binary: &Path, elf_addr: u64) -> Result<Option<Vec<Param>>, SymbolError> {
    function_params_in(binary, elf_addr, &DebugSources::default())
}

/// [`function_params`] with the given sources of separate debug files.
pub fn function_params_in(
    binary: &Path,
    elf_addr: u64,
    sources: &DebugSources,
) -> Result<Option<Vec<Param>>, SymbolError> {
    Ok(with_dies(binary, sources, |dies| dies.params_at(elf_addr))?.flatten())
}

/// The members `members` through parameter `param` of the function at `elf_addr` (`req->len`: `["len"]`):
/// None without DWARF for the function or parameter, an error text where the types do not allow the path.
pub fn member_path_in(
    binary: &Path,
    elf_addr: u64,
    param: &str,
    members: &[&str],
    sources: &DebugSources,
) -> Result<Option<Result<MemberPath, String>>, SymbolError> {
    let found = with_dies(binary, sources, |dies| {
        let Some(ty) = dies.param_type_at(elf_addr, param)? else {
            return Ok(None);
        };
        dies.member_path(ty, param, members).map(Some)
    })?;
    Ok(found.flatten())
}

/// Run `f` on the DWARF of `binary` (its own, else its separate debug file's); None when there is none.
fn with_dies<T>(
    binary: &Path,
    sources: &DebugSources,
    f: impl FnOnce(&mut Dies<R<'_>>) -> gimli::Result<T>,
) -> Result<Option<T>, SymbolError> {
    let data = ElfData::read(binary)?;
    let file = data.parse(binary)?;
    if has_dwarf(&file) {
        return in_file(&file, binary, f).map(Some);
    }
    let build_id = file.build_id().ok().flatten();
    let hints = DebugHints {
        opened: binary,
        original: binary,
        build_id,
        debuglink: file.gnu_debuglink().ok().flatten(),
    };
    let found = find_debug_file(&hints, &sources.dirs).found;
    let Some(debug_path) = found.or_else(|| sources.fetch_debuginfo(build_id)) else {
        return Ok(None);
    };
    let debug = ElfData::read(&debug_path)?;
    let debug_file = debug.parse(&debug_path)?;
    in_file(&debug_file, &debug_path, f).map(Some)
}

type R<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

fn in_file<T>(
    file: &object::File<'_>,
    path: &Path,
    f: impl FnOnce(&mut Dies<R<'_>>) -> gimli::Result<T>,
) -> Result<T, SymbolError> {
    let corrupt = |e: gimli::Error| SymbolError::CorruptElf {
        path: path.to_path_buf(),
        reason: format!("DWARF: {e}"),
    };
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<'_, [u8]>, gimli::Error> {
        Ok(section_bytes(file, id))
    })
    .map_err(corrupt)?;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let dwarf = sections.borrow(|s| gimli::EndianSlice::new(s, endian));
    // A one-off lookup: every unit it reads is kept.
    let mut dies = Dies::new(dwarf, usize::MAX);
    f(&mut dies).map_err(corrupt)
}

/// The bytes of a DWARF section (decompressed when stored compressed); empty when missing, unreadable,
/// implausibly compressed, or never read here.
fn section_bytes<'d>(file: &object::File<'d>, id: gimli::SectionId) -> Cow<'d, [u8]> {
    use gimli::SectionId::*;
    let needed = matches!(
        id,
        DebugInfo
            | DebugAbbrev
            | DebugStr
            | DebugLineStr
            | DebugStrOffsets
            | DebugAddr
            | DebugRanges
            | DebugRngLists
            | DebugAranges
            // Making a unit reads its line program's header.
            | DebugLine
    );
    let Some(section) = needed.then(|| file.section_by_name(id.name())).flatten() else {
        return Cow::Borrowed(&[]);
    };
    match section.compressed_data() {
        Ok(c) if crate::elf_layout::fits_expansion(&c) => c.decompress().unwrap_or_default(),
        _ => Cow::Borrowed(&[]),
    }
}

impl<'a> Dies<R<'a>> {
    /// The units that may hold `addr`: the one `.debug_aranges` names, else every unit whose ranges hold it.
    fn units_for(&mut self, addr: u64) -> gimli::Result<Vec<usize>> {
        let mut aranges = self.dwarf.debug_aranges.headers();
        while let Some(header) = aranges.next()? {
            let mut entries = header.entries();
            while let Some(entry) = entries.next()? {
                if entry.range().begin <= addr && addr < entry.range().end {
                    let unit = self.unit_holding(header.debug_info_offset().0)?;
                    return Ok(unit.into_iter().collect());
                }
            }
        }
        let mut out = Vec::new();
        for start in self.bounds()?.iter().map(|r| r.start).collect::<Vec<_>>() {
            let mut ranges = self.unit_ref(start)?.unit_ranges()?;
            while let Some(r) = ranges.next()? {
                if r.begin <= addr && addr < r.end {
                    out.push(start);
                    break;
                }
            }
        }
        Ok(out)
    }

    fn type_of(&mut self, at: DieRef) -> gimli::Result<Option<DieRef>> {
        match self.inherited(at, gimli::DW_AT_type)? {
            Some(((unit, _), value)) => self.reference(unit, value),
            None => Ok(None),
        }
    }

    fn udata(&mut self, at: DieRef, attr: gimli::DwAt) -> gimli::Result<Option<u64>> {
        Ok(self.entry(at)?.attr(attr).and_then(|a| a.udata_value()))
    }

    /// The parameters of the concrete (non-inlined) function starting at `addr`; None when no DIE has it.
    fn params_at(&mut self, addr: u64) -> gimli::Result<Option<Vec<Param>>> {
        for unit in self.units_for(addr)? {
            if let Some(function) = self.function_at(unit, addr)? {
                return self.params_of((unit, function)).map(Some);
            }
        }
        Ok(None)
    }

    /// The subprogram DIE of `unit` whose code starts at `addr`.
    fn function_at(&mut self, unit: usize, addr: u64) -> gimli::Result<Option<UnitOffset>> {
        let u = self.unit_ref(unit)?;
        let mut cursor = u.entries();
        while let Some(entry) = cursor.next_dfs()? {
            if entry.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let start = match entry.attr_value(gimli::DW_AT_low_pc) {
                Some(low) => u.attr_address(low)?,
                None if entry.attr(gimli::DW_AT_ranges).is_some() => {
                    u.die_ranges(entry)?.next()?.map(|r| r.begin)
                }
                None => None,
            };
            if start == Some(addr) {
                return Ok(Some(entry.offset()));
            }
        }
        Ok(None)
    }

    /// The DW_TAG_formal_parameter children of a DIE, in order.
    fn param_children(&mut self, at: DieRef) -> gimli::Result<Vec<UnitOffset>> {
        Ok(self
            .children(at)?
            .into_iter()
            .filter(|(_, tag)| *tag == gimli::DW_TAG_formal_parameter)
            .map(|(offset, _)| offset)
            .collect())
    }

    fn params_of(&mut self, function: DieRef) -> gimli::Result<Vec<Param>> {
        let mut children = self.param_children(function)?;
        let mut unit = function.0;
        if children.is_empty() {
            // An out-of-line copy may leave its parameters to the abstract instance.
            if let Some(origin) = self.follow(function, gimli::DW_AT_abstract_origin)? {
                children = self.param_children(origin)?;
                unit = origin.0;
            }
        }
        let mut params = Vec::new();
        let ret = self.type_of(function)?;
        if ret.is_some() {
            let desc = self.describe(ret, 0)?;
            if matches!(desc.kind, ParamType::Aggregate { size } if size > 16) || desc.by_reference
            {
                params.push(Param {
                    name: "<return slot>".into(),
                    ty: ParamType::Pointer { to_char: false },
                    text: None,
                    type_name: format!("{} *", desc.name),
                    artificial: true,
                });
            }
        }
        for (i, offset) in children.into_iter().enumerate() {
            let at = (unit, offset);
            let name = self.name(at)?.unwrap_or_else(|| format!("arg{i}"));
            let artificial = matches!(
                self.inherited(at, gimli::DW_AT_artificial)?,
                Some((_, AttributeValue::Flag(true)))
            );
            let ty = self.type_of(at)?;
            let desc = self.describe(ty, 0)?;
            let kind = if desc.by_reference {
                ParamType::Pointer { to_char: false }
            } else {
                desc.kind
            };
            let text = match (desc.by_reference, desc.std_string) {
                (true, Some(StdString::String)) => Some(Text::StringAt),
                (false, Some(StdString::View)) => Some(Text::StringView),
                _ => desc.text,
            };
            params.push(Param {
                name,
                ty: kind,
                text,
                type_name: desc.name,
                artificial,
            });
        }
        Ok(params)
    }
}

mod cxx;
mod members;
pub use members::MemberPath;
#[cfg(test)]
mod tests;
mod types;

use types::StdString;
