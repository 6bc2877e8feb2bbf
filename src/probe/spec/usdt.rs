//! USDT probes (SystemTap SDT, `sys/sdt.h`) of an ELF file: the `.note.stapsdt` notes, turned into what
//! `uprobe_events` takes: `PATH:0xOFFSET(0xSEMAPHORE_OFFSET) NAME=FETCHARG…`.
//!
//! A note (owner `stapsdt`, type 3) holds the probe's address, the link-time address of `.stapsdt.base`, the
//! semaphore's address (0: none), each an address-sized word, then three NUL-terminated strings: provider,
//! name, arguments. When the file was prelinked, `.stapsdt.base` moved and the addresses move with it.
//! Both addresses are ELF virtual addresses, converted to file offsets through the PT_LOAD segments: the probe
//! offset for the uprobe, the semaphore's for the kernel's reference counter (`ref_ctr_offset`), which it
//! increments in every process that maps the file while the probe exists.
mod arg;

pub use arg::{ArgLocation, UsdtArg};

use crate::addr::ElfAddr;
use crate::elf_layout::ElfLayout;
use crate::mapped::MappedFile;
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The note type of SystemTap SDT probes (version 3 of the format).
const NT_STAPSDT: u32 = 3;

/// One USDT probe of a file.
#[derive(Clone, Debug, PartialEq)]
pub struct UsdtProbe {
    pub provider: String,
    pub name: String,
    /// The file offset of the probe (what `uprobe_events` wants after `PATH:`).
    pub offset: u64,
    /// The file offset of the semaphore (the `ref_ctr_offset` in `PATH:0xOFF(0xREF)`), None without one.
    pub semaphore: Option<u64>,
    pub args: Vec<UsdtArg>,
}

/// Errors of reading and selecting USDT probes. Each names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum UsdtError {
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path} is not an ELF file rprof can read: {reason}")]
    NotElf { path: PathBuf, reason: String },
    #[error("{path} has no USDT probes (.note.stapsdt); it was built without sys/sdt.h probes")]
    NoNotes { path: PathBuf },
    #[error("{path}: corrupt .note.stapsdt: {reason}")]
    BadNote { path: PathBuf, reason: String },
    #[error("{path}: USDT probe {provider}:{name} is at {addr:#x}, outside every loadable segment of the file")]
    NotLoaded {
        path: PathBuf,
        provider: String,
        name: String,
        addr: u64,
    },
    #[error("{path} has no USDT provider `{provider}` (it has: {})", available.join(", "))]
    NoProvider {
        path: PathBuf,
        provider: String,
        available: Vec<String>,
    },
    #[error(
        "{path} has no USDT probe `{provider}:{name}` (it has: {})",
        list_some(available)
    )]
    NoProbe {
        path: PathBuf,
        provider: String,
        name: String,
        available: Vec<String>,
    },
}

/// The first names of a list, and how many more there are.
fn list_some(names: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut out = names
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    out
}

/// Read every USDT probe of the ELF file at `path`, in note order.
pub fn read_probes(path: &Path) -> Result<Vec<UsdtProbe>, UsdtError> {
    let data = MappedFile::open(path).map_err(|e| UsdtError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let file = object::File::parse(&*data).map_err(|e| UsdtError::NotElf {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if file.format() != object::BinaryFormat::Elf {
        return Err(UsdtError::NotElf {
            path: path.to_path_buf(),
            reason: format!("it is a {:?} file", file.format()),
        });
    }
    let bad = |reason: String| UsdtError::BadNote {
        path: path.to_path_buf(),
        reason,
    };
    let mut notes = Vec::new();
    let mut found_section = false;
    for section in file.sections() {
        if section.name() != Ok(".note.stapsdt") {
            continue;
        }
        found_section = true;
        let bytes = section.data().map_err(|e| bad(e.to_string()))?;
        let align = if section.align() == 8 { 8 } else { 4 };
        let layout = NoteLayout {
            little_endian: file.is_little_endian(),
            addr_size: if file.is_64() { 8 } else { 4 },
            align,
        };
        notes.extend(parse_notes(bytes, layout).map_err(bad)?);
    }
    if !found_section || notes.is_empty() {
        return Err(UsdtError::NoNotes {
            path: path.to_path_buf(),
        });
    }
    let base_section = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let layout = ElfLayout::of(&file);
    let x86_64 = file.architecture() == object::Architecture::X86_64;
    let mut symbols: Option<HashMap<String, u64>> = None;
    let mut probes = Vec::with_capacity(notes.len());
    for note in notes {
        let pc = prelink_adjust(note.pc, note.base, base_section);
        let semaphore = prelink_adjust(note.semaphore, note.base, base_section);
        let not_loaded = |addr: u64| UsdtError::NotLoaded {
            path: path.to_path_buf(),
            provider: note.provider.clone(),
            name: note.name.clone(),
            addr,
        };
        let offset = layout.file_offset(ElfAddr(pc)).ok_or(not_loaded(pc))?.0;
        let semaphore = match semaphore {
            0 => None,
            addr => Some(file_backed_offset(&layout, addr).ok_or(not_loaded(addr))?),
        };
        let args = if x86_64 {
            // `@+` values are relative to the probed code's address-offset delta.
            let delta = pc.wrapping_sub(offset);
            let mut symbol = |name: &str| {
                let table = symbols.get_or_insert_with(|| symbol_addresses(&file));
                table.get(name).and_then(|a| a.checked_sub(delta))
            };
            arg::parse_args(&note.args, &mut symbol)
        } else {
            let why = format!("arguments of {:?} are not supported", file.architecture());
            note.args
                .split_ascii_whitespace()
                .map(|spec| UsdtArg {
                    size: 8,
                    signed: false,
                    location: ArgLocation::Unsupported(why.clone()),
                    spec: spec.to_string(),
                })
                .collect()
        };
        probes.push(UsdtProbe {
            provider: note.provider,
            name: note.name,
            offset,
            semaphore,
            args,
        });
    }
    Ok(probes)
}

/// The file offset of an address the file's bytes back (not in the zero-filled tail of a segment, which the
/// kernel cannot find through the file).
fn file_backed_offset(layout: &ElfLayout, addr: u64) -> Option<u64> {
    let offset = layout.file_offset(ElfAddr(addr))?;
    (layout.elf_addr(offset) == Some(ElfAddr(addr))).then_some(offset.0)
}

/// Every named symbol's address (`.symtab` and `.dynsym`), for `symbol(%rip)` arguments.
fn symbol_addresses(file: &object::File<'_>) -> HashMap<String, u64> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.is_definition())
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
        .collect()
}

/// The prelink adjustment: when the file has a `.stapsdt.base` section at `base_section`, an address the note
/// recorded moves by how far the section moved from `note_base`, the address the note recorded for it.
/// Zero (no semaphore) stays zero.
pub fn prelink_adjust(addr: u64, note_base: u64, base_section: Option<u64>) -> u64 {
    match base_section {
        Some(section) if addr != 0 => addr.wrapping_add(section).wrapping_sub(note_base),
        _ => addr,
    }
}

/// How notes are laid out in a file.
#[derive(Clone, Copy, Debug)]
struct NoteLayout {
    little_endian: bool,
    /// 8 for ELF64, 4 for ELF32.
    addr_size: usize,
    /// Padding of the name and the description: 4, or 8 for sections aligned so.
    align: usize,
}

/// One `stapsdt` note as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RawNote {
    pc: u64,
    base: u64,
    semaphore: u64,
    provider: String,
    name: String,
    args: String,
}

/// Parse the `stapsdt` notes of a `.note.stapsdt` section's bytes (notes of other owners or types skipped).
fn parse_notes(bytes: &[u8], layout: NoteLayout) -> Result<Vec<RawNote>, String> {
    let word = |b: &[u8]| -> u64 {
        let mut v = 0u64;
        for (i, byte) in b.iter().enumerate() {
            let shift = if layout.little_endian {
                i
            } else {
                b.len() - 1 - i
            };
            v |= u64::from(*byte) << (8 * shift);
        }
        v
    };
    let pad = |n: usize| n.div_ceil(layout.align) * layout.align;
    let mut notes = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let namesz = word(&bytes[at..at + 4]) as usize;
        let descsz = word(&bytes[at + 4..at + 8]) as usize;
        let kind = word(&bytes[at + 8..at + 12]) as u32;
        let name_at = at + 12;
        let desc_at = name_at
            .checked_add(pad(namesz))
            .filter(|&d| d <= bytes.len())
            .ok_or_else(|| format!("the note at byte {at} has a name past the section's end"))?;
        let end = desc_at
            .checked_add(descsz)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| {
                format!("the note at byte {at} has a description past the section's end")
            })?;
        let owner = &bytes[name_at..name_at + namesz];
        if owner.strip_suffix(b"\0").unwrap_or(owner) == b"stapsdt" && kind == NT_STAPSDT {
            let desc = &bytes[desc_at..end];
            let a = layout.addr_size;
            if desc.len() < 3 * a {
                return Err(format!(
                    "the note at byte {at} is too short for three addresses"
                ));
            }
            let mut strings = desc[3 * a..].split(|&b| b == 0);
            let mut text = |what: &str| -> Result<String, String> {
                let s = strings
                    .next()
                    .ok_or_else(|| format!("the note at byte {at} has no {what}"))?;
                Ok(String::from_utf8_lossy(s).into_owned())
            };
            let (provider, name) = (text("provider")?, text("name")?);
            let args = text("arguments").unwrap_or_default();
            notes.push(RawNote {
                pc: word(&desc[..a]),
                base: word(&desc[a..2 * a]),
                semaphore: word(&desc[2 * a..3 * a]),
                provider,
                name,
                args,
            });
        }
        at = desc_at + pad(descsz);
    }
    Ok(notes)
}

impl UsdtProbe {
    /// One line for `rprof probe -l`:
    /// `usdt:python:import__find__load__start  (offset 0x5273a, semaphore offset 0x683272)  args: arg0=8@%rax`.
    pub fn list_line(&self) -> String {
        let mut line = format!(
            "usdt:{}:{}  (offset {:#x}",
            self.provider, self.name, self.offset
        );
        if let Some(s) = self.semaphore {
            line.push_str(&format!(", semaphore offset {s:#x}"));
        }
        line.push(')');
        if !self.args.is_empty() {
            line.push_str("  args:");
            for (i, a) in self.args.iter().enumerate() {
                line.push_str(&format!(" arg{i}={}", a.spec));
                if matches!(a.location, ArgLocation::Unsupported(_)) {
                    line.push_str(" (unsupported)");
                }
            }
        }
        line
    }
}

/// A glob matcher; a pattern that is not a valid glob matches itself literally.
fn glob(pattern: &str) -> impl Fn(&str) -> bool + '_ {
    let matcher = globset::Glob::new(pattern)
        .ok()
        .map(|g| g.compile_matcher());
    move |s: &str| match &matcher {
        Some(m) => m.is_match(s),
        None => s == pattern,
    }
}

/// The probes whose provider and name match the globs, in file order.
pub fn matching<'a>(
    probes: &'a [UsdtProbe],
    provider_glob: &str,
    name_glob: &str,
) -> Vec<&'a UsdtProbe> {
    let (provider, name) = (glob(provider_glob), glob(name_glob));
    probes
        .iter()
        .filter(|p| provider(&p.provider) && name(&p.name))
        .collect()
}

/// [`matching`], with an error naming what the file has when nothing matches: its providers when no
/// provider matches ([`UsdtError::NoProvider`]), else the probes of the matching providers
/// ([`UsdtError::NoProbe`]). `path` names the file in the error.
pub fn select<'a>(
    path: &Path,
    probes: &'a [UsdtProbe],
    provider_glob: &str,
    name_glob: &str,
) -> Result<Vec<&'a UsdtProbe>, UsdtError> {
    let found = matching(probes, provider_glob, name_glob);
    if !found.is_empty() {
        return Ok(found);
    }
    let provider = glob(provider_glob);
    let mut providers: Vec<String> = probes.iter().map(|p| p.provider.clone()).collect();
    providers.sort();
    providers.dedup();
    if !providers.iter().any(|p| provider(p)) {
        return Err(UsdtError::NoProvider {
            path: path.to_path_buf(),
            provider: provider_glob.to_string(),
            available: providers,
        });
    }
    let mut names: Vec<String> = probes
        .iter()
        .filter(|p| provider(&p.provider))
        .map(|p| format!("{}:{}", p.provider, p.name))
        .collect();
    names.sort();
    names.dedup();
    Err(UsdtError::NoProbe {
        path: path.to_path_buf(),
        provider: provider_glob.to_string(),
        name: name_glob.to_string(),
        available: names,
    })
}

#[cfg(test)]
mod tests;
