//! Turning patterns into probe targets: symbols of a binary or library (one target per address, aliases
//! folded), syscalls, tracepoints and kernel functions.
use super::fetch::{ArgSource, FetchType};
use super::ifuncs::{is_literal, row_name, Ifuncs};
use super::library::find_library;
use super::pattern::{shared_short_names, short_name, strip_rust_hash, NameMatcher, Spec};
use crate::addr::{ElfAddr, FileOffset};
use crate::probe::target::{Target, TargetKind};
use crate::probe::ProbeError;
use crate::tracefs::Tracefs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::symbols::{elf_info, function_symbols, DebugSources};

/// Where `probe` looks for things: the binary of `-x`, the target pid for libraries, debug dirs, regex mode.
#[derive(Clone, Debug, Default)]
pub struct ResolveOptions {
    pub binary: Option<PathBuf>,
    pub pid: Option<u32>,
    pub regex: bool,
    pub debug: DebugSources,
}

/// Resolve all patterns into targets, in pattern order, each address or event once.
pub fn resolve(
    patterns: &[Spec],
    opts: &ResolveOptions,
    tracefs: Option<&Tracefs>,
) -> Result<Vec<Target>, ProbeError> {
    let mut out: Vec<Target> = Vec::new();
    for spec in patterns {
        let found = match spec {
            Spec::User { library, pattern } => {
                let path = match library {
                    Some(lib) => find_library(lib, opts.pid)?,
                    None => opts.binary.clone().ok_or_else(|| ProbeError::NoBinary {
                        pattern: pattern.clone(),
                    })?,
                };
                resolve_user(&path, pattern, opts.regex, &opts.debug)?
            }
            Spec::Syscall { pattern } => resolve_syscalls(need(tracefs)?, pattern, opts.regex)?,
            Spec::Tracepoint { category, event } => {
                resolve_tracepoints(need(tracefs)?, category, event, opts.regex)?
            }
            Spec::Kernel { pattern } => resolve_kernel(need(tracefs)?, pattern, opts.regex)?,
            Spec::Usdt {
                library,
                provider,
                name,
            } => {
                let path = match library {
                    Some(lib) => find_library(lib, opts.pid)?,
                    None => opts.binary.clone().ok_or_else(|| ProbeError::NoBinary {
                        pattern: format!("usdt:{provider}:{name}"),
                    })?,
                };
                resolve_usdt(&path, provider, name)?
            }
            Spec::Software {
                event,
                sample,
                name,
            } => vec![software_target(event, *sample, name)],
        };
        for t in found {
            if !out.iter().any(|o| o.kind == t.kind) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// The USDT probes of `path` whose provider and name match the globs, one target per probe address (a probe
/// that the compiler duplicated, by inlining or unrolling, is one target per copy, named alike).
pub fn resolve_usdt(path: &Path, provider: &str, name: &str) -> Result<Vec<Target>, ProbeError> {
    use super::usdt;
    let path = std::fs::canonicalize(path).map_err(|error| ProbeError::Binary {
        path: path.to_path_buf(),
        error,
    })?;
    let probes = usdt::read_probes(&path)?;
    let found = usdt::select(&path, &probes, provider, name)?;
    Ok(found
        .into_iter()
        .map(|p| Target {
            name: format!("usdt:{}:{}", p.provider, p.name),
            aliases: Vec::new(),
            kind: TargetKind::Usdt {
                path: path.clone(),
                offset: FileOffset(p.offset),
                semaphore: p.semaphore,
                args: p.args.iter().map(usdt_arg_source).collect(),
            },
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        })
        .collect())
}

/// The target of a `profile:` or `software:` pattern: a perf software event, nothing to resolve.
fn software_target(
    event: &'static crate::perf::software::SoftwareEvent,
    sample: crate::perf::software::Sample,
    name: &str,
) -> Target {
    Target {
        name: name.to_string(),
        aliases: Vec::new(),
        kind: TargetKind::Software { event, sample },
        fetches: Vec::new(),
        code: None,
        go: None,
        syscall_sites: Vec::new(),
        filter: None,
    }
}

/// A USDT argument as the fetch planner sees it.
fn usdt_arg_source(a: &super::usdt::UsdtArg) -> ArgSource {
    ArgSource {
        spec: a.spec.clone(),
        base: a
            .fetch()
            .map(|f| f.rsplit_once(':').map_or(f.clone(), |(b, _)| b.to_string())),
        ty: FetchType::Int {
            size: a.size,
            signed: a.signed,
        },
        pointer_sized: a.size == 8,
    }
}

fn need(t: Option<&Tracefs>) -> Result<&Tracefs, ProbeError> {
    t.ok_or(ProbeError::NoTracefs)
}

/// The functions of `path` that match `pattern`, one target per address (aliases folded), sorted by address.
pub fn resolve_user(
    path: &Path,
    pattern: &str,
    regex: bool,
    debug: &DebugSources,
) -> Result<Vec<Target>, ProbeError> {
    if let Some(address) = super::address::parse(pattern).filter(|_| !regex) {
        return super::address::resolve(path, pattern, &address, debug);
    }
    let matcher = NameMatcher::new(pattern, regex)?;
    let path = std::fs::canonicalize(path).map_err(|error| ProbeError::Binary {
        path: path.to_path_buf(),
        error,
    })?;
    let info = elf_info(&path)?;
    let symbols = function_symbols(&path, debug)?;
    let ifuncs = Ifuncs::of(&path);
    let by_addr = names_by_addr(&symbols, &matcher, &ifuncs, is_literal(pattern, regex));
    let ifunc_rows = ifuncs.names_by_target();
    let mut out = Vec::new();
    for (addr, (mut matched, others)) in by_addr {
        if matched.is_empty() {
            continue;
        }
        let addr = ElfAddr(addr);
        let Some(seg) = info
            .layout
            .segments
            .iter()
            .find(|s| addr.0 >= s.vaddr && addr.0 - s.vaddr < s.file_size)
        else {
            continue;
        };
        if !seg.executable {
            continue;
        }
        let Some(offset) = info.layout.file_offset(addr) else {
            continue;
        };
        // Prefer the plainest name: fewest leading underscores, then shortest.
        matched.sort_by_key(|n| {
            (
                n.len() - n.trim_start_matches('_').len(),
                n.len(),
                n.clone(),
            )
        });
        let mut name = matched.remove(0);
        let mut aliases = matched;
        aliases.extend(others);
        // An implementation that IFUNCs resolve to is named by them, all of them (`memcpy/memmove`).
        if let Some(names) = ifunc_rows.get(&addr.0).filter(|n| n.contains(&name)) {
            aliases.retain(|a| !names.contains(a));
            name = row_name(names, &matcher);
        }
        out.push(Target {
            name,
            aliases,
            kind: TargetKind::User {
                path: path.clone(),
                addr,
                offset,
            },
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        });
    }
    if out.is_empty() {
        if let Some(names) = ifuncs.unresolved_match(&matcher) {
            return Err(ProbeError::IfuncUnresolved {
                names,
                path: path.clone(),
            });
        }
        return Err(ProbeError::NoMatch {
            what: "functions",
            pattern: pattern.to_string(),
            place: path.display().to_string(),
        });
    }
    let go = info.is_go.then(|| super::go::go_version(&path).flatten());
    attach_code(&path, &info.layout, &symbols, go, &mut out);
    Ok(out)
}

/// Names by address: (names that matched, other names at the address), IFUNC names at what they resolve to.
/// A name is the short one, or the full one (parameters included) where functions at other addresses share the
/// short one: C++ overloads. The IFUNCs' resolvers are left out unless `literal` names one.
fn names_by_addr(
    symbols: &[crate::symbols::FunctionSymbol],
    matcher: &NameMatcher,
    ifuncs: &Ifuncs,
    literal: bool,
) -> BTreeMap<u64, (Vec<String>, Vec<String>)> {
    let shared = shared_short_names(symbols.iter().map(|s| (&*s.name, &*s.demangled, s.addr.0)));
    let mut by_addr: BTreeMap<u64, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut add = |addr: u64, name: String, matched: bool| {
        let e = by_addr.entry(addr).or_default();
        let list = if matched { &mut e.0 } else { &mut e.1 };
        if !list.contains(&name) {
            list.push(name);
        }
    };
    for s in symbols {
        let short = short_name(&s.name, &s.demangled);
        let name = match shared.contains(short) {
            true => strip_rust_hash(&s.demangled).to_string(),
            false => short.to_string(),
        };
        add(
            s.addr.0,
            name,
            matcher.matches_symbol(&s.name, &s.demangled),
        );
    }
    for f in &ifuncs.list {
        if let Some(target) = f.target {
            add(target.0, f.name.clone(), matcher.is_match(&f.name));
        }
    }
    if !literal {
        for r in ifuncs.resolvers() {
            by_addr.remove(&r);
        }
    }
    for (matched, others) in by_addr.values_mut() {
        others.retain(|o| !matched.contains(o));
    }
    by_addr
}

/// Read and analyze the machine code of each user target (for probe placement), and for a Go binary (`go`: the
/// Go version that built it, if known) how each function can be probed. A function whose code cannot be read
/// is left without: it is probed at its first instruction.
fn attach_code(
    path: &Path,
    layout: &crate::elf_layout::ElfLayout,
    symbols: &[crate::symbols::FunctionSymbol],
    go: Option<Option<(u32, u32)>>,
    targets: &mut [Target],
) {
    let Ok(file) = crate::mapped::MappedFile::open(path) else {
        return;
    };
    let bytes_at = |addr: u64, size: u64| -> Option<&[u8]> {
        let off = layout.file_offset(ElfAddr(addr))?.0 as usize;
        file.get(off..off.checked_add(size as usize)?)
    };
    for t in targets {
        let TargetKind::User { addr, .. } = &t.kind else {
            continue;
        };
        let at = symbols.iter().filter(|s| s.addr == *addr);
        let size = at.clone().map(|s| s.size).max().unwrap_or(0);
        let names: Vec<&str> = at.map(|s| s.name.as_str()).collect();
        t.go = go.map(|version| super::go::function(version, &names));
        let Some(body) = bytes_at(addr.0, size).filter(|b| !b.is_empty()) else {
            continue;
        };
        // GCC's `f.cold` (and `f.cold.N`) parts jump back into `f`.
        let cold: Vec<(u64, &[u8])> = symbols
            .iter()
            .filter(|s| {
                names.iter().any(|n| {
                    s.name
                        .strip_prefix(n)
                        .is_some_and(|rest| rest == ".cold" || rest.starts_with(".cold."))
                })
            })
            .filter_map(|s| Some((s.addr.0, bytes_at(s.addr.0, s.size)?)))
            .collect();
        t.code = Some(super::code::analyze(addr.0, body, &cold, go.is_some()));
    }
}

/// Syscalls matching `pattern` that have both enter and exit tracepoints.
pub fn resolve_syscalls(
    tracefs: &Tracefs,
    pattern: &str,
    regex: bool,
) -> Result<Vec<Target>, ProbeError> {
    let matcher = NameMatcher::new(pattern, regex)?;
    let events = tracefs
        .events("syscalls")
        .map_err(|_| ProbeError::NoSyscallTracepoints)?;
    let out: Vec<Target> = events
        .iter()
        .filter_map(|e| e.strip_prefix("sys_enter_"))
        .filter(|name| {
            matcher.is_match(name)
                && events
                    .iter()
                    .any(|e| e.strip_prefix("sys_exit_") == Some(name))
        })
        .map(|name| Target {
            name: format!("syscall:{name}"),
            aliases: Vec::new(),
            kind: TargetKind::Syscall {
                name: name.to_string(),
            },
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        })
        .collect();
    if out.is_empty() {
        return Err(ProbeError::NoMatch {
            what: "syscalls",
            pattern: pattern.to_string(),
            place: tracefs.root().join("events/syscalls").display().to_string(),
        });
    }
    Ok(out)
}

/// Tracepoints `category:event` matching both globs.
pub fn resolve_tracepoints(
    tracefs: &Tracefs,
    category: &str,
    event: &str,
    regex: bool,
) -> Result<Vec<Target>, ProbeError> {
    let cm = NameMatcher::new(category, regex)?;
    let em = NameMatcher::new(event, regex)?;
    let mut out = Vec::new();
    for c in tracefs.categories()?.into_iter().filter(|c| cm.is_match(c)) {
        for e in tracefs.events(&c)?.into_iter().filter(|e| em.is_match(e)) {
            out.push(Target {
                name: format!("{c}:{e}"),
                aliases: Vec::new(),
                kind: TargetKind::Tracepoint {
                    category: c.clone(),
                    event: e,
                },
                fetches: Vec::new(),
                code: None,
                go: None,
                syscall_sites: Vec::new(),
                filter: None,
            });
        }
    }
    if out.is_empty() {
        return Err(ProbeError::NoMatch {
            what: "tracepoints",
            pattern: format!("{category}:{event}"),
            place: tracefs.root().join("events").display().to_string(),
        });
    }
    Ok(out)
}

/// Kernel functions matching `pattern` in `available_filter_functions` (fails without `kprobe_events`).
pub fn resolve_kernel(
    tracefs: &Tracefs,
    pattern: &str,
    regex: bool,
) -> Result<Vec<Target>, ProbeError> {
    tracefs.require(crate::tracefs::ProbeFile::Kprobe)?;
    let matcher = NameMatcher::new(pattern, regex)?;
    let mut names: Vec<String> = tracefs
        .available_functions()?
        .into_iter()
        .filter(|n| matcher.is_match(n))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err(ProbeError::NoMatch {
            what: "kernel functions",
            pattern: pattern.to_string(),
            place: "available_filter_functions".into(),
        });
    }
    Ok(names
        .into_iter()
        .map(|n| Target {
            name: n.clone(),
            aliases: Vec::new(),
            kind: TargetKind::Kernel { symbol: n },
            fetches: Vec::new(),
            code: None,
            go: None,
            syscall_sites: Vec::new(),
            filter: None,
        })
        .collect())
}
