//! Turning patterns into probe targets: symbols of a binary or library (one target per address, aliases
//! folded), syscalls, tracepoints and kernel functions.
use super::fetch::{ArgSource, Fetch, FetchType};
use super::pattern::{short_name, NameMatcher, Spec};
use super::ProbeError;
use crate::addr::{ElfAddr, FileOffset};
use crate::tracefs::Tracefs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::symbols::{elf_info, function_symbols, DebugSources};

/// What is probed for one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A function in a binary: a uprobe (and a uretprobe) at `offset` of `path`.
    User {
        path: PathBuf,
        addr: ElfAddr,
        offset: FileOffset,
    },
    /// A kernel function: a kprobe (and a kretprobe).
    Kernel { symbol: String },
    /// A syscall: `syscalls:sys_enter_NAME` paired with `syscalls:sys_exit_NAME`.
    Syscall { name: String },
    /// A tracepoint, counted.
    Tracepoint { category: String, event: String },
    /// A USDT probe (`.note.stapsdt`): a uprobe at `offset` of `path`, with its semaphore's file offset (the
    /// kernel counts it up while the probe is enabled, so "is enabled" guards fire), counted.
    Usdt {
        path: PathBuf,
        offset: FileOffset,
        semaphore: Option<u64>,
        args: Vec<ArgSource>,
    },
    /// `--pair START,DONE`: two probe points timed as one call (START opens it, DONE closes it on the same
    /// thread, innermost first).
    Pair {
        start: Box<TargetKind>,
        done: Box<TargetKind>,
    },
}

impl TargetKind {
    /// The probed file and offset of a uprobe (user functions and USDT probes), with its semaphore.
    pub fn uprobe_at(&self) -> Option<(&Path, u64, Option<u64>)> {
        match self {
            TargetKind::User { path, offset, .. } => Some((path, offset.0, None)),
            TargetKind::Usdt {
                path,
                offset,
                semaphore,
                ..
            } => Some((path, offset.0, *semaphore)),
            _ => None,
        }
    }
}

/// One thing to count (and time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The display name (demangled, without Rust hash).
    pub name: String,
    /// Other names at the same address (probed once).
    pub aliases: Vec<String>,
    pub kind: TargetKind,
    /// Values fetched at its entry or return (arguments, `ret`, `caller`).
    pub fetches: Vec<Fetch>,
}

impl Target {
    /// True when the target has a return event to pair with (user and kernel functions, syscalls, pairs).
    pub fn can_time(&self) -> bool {
        !matches!(
            self.kind,
            TargetKind::Tracepoint { .. } | TargetKind::Usdt { .. }
        )
    }

    /// True when the target is a function whose return value can be fetched.
    pub fn can_return(&self) -> bool {
        matches!(
            self.kind,
            TargetKind::User { .. } | TargetKind::Kernel { .. }
        )
    }
}

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
        })
        .collect())
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

/// `--pair START,DONE`: each names exactly one uprobe location (a function or a USDT probe).
pub fn resolve_pair(start: &str, done: &str, opts: &ResolveOptions) -> Result<Target, ProbeError> {
    let one = |text: &str| -> Result<Target, ProbeError> {
        let split = super::fetch::split_spec(text)?;
        let spec = super::pattern::parse_spec(split.pattern, opts.binary.is_some())?;
        let found = resolve(std::slice::from_ref(&spec), opts, None)?;
        let bad = |reason: String| ProbeError::Spec {
            spec: format!("--pair {start},{done}"),
            reason,
        };
        match found.as_slice() {
            [t] if t.kind.uprobe_at().is_some() => Ok(t.clone()),
            [t] => Err(bad(format!(
                "{} is not a user function or USDT probe",
                t.name
            ))),
            many => Err(bad(format!(
                "`{text}` matches {} probe points; name exactly one",
                many.len()
            ))),
        }
    };
    let (s, d) = (one(start)?, one(done)?);
    let short = |n: &str| n.rsplit(':').next().unwrap_or(n).to_string();
    let (a, b) = (short(&s.name), short(&d.name));
    // `import__find__load__{start..done}`: the common prefix once.
    let common = a
        .char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, c), _)| i + c.len_utf8())
        .last()
        .unwrap_or(0);
    let name = if common >= 4 && common < a.len() && common < b.len() {
        format!("{}{{{}..{}}}", &a[..common], &a[common..], &b[common..])
    } else {
        format!("{a}..{b}")
    };
    Ok(Target {
        name,
        aliases: Vec::new(),
        kind: TargetKind::Pair {
            start: Box::new(s.kind),
            done: Box::new(d.kind),
        },
        fetches: Vec::new(),
    })
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
    let matcher = NameMatcher::new(pattern, regex)?;
    let path = std::fs::canonicalize(path).map_err(|error| ProbeError::Binary {
        path: path.to_path_buf(),
        error,
    })?;
    let info = elf_info(&path)?;
    let symbols = function_symbols(&path, debug)?;
    // address -> (names that matched, other names at the address)
    let mut by_addr: BTreeMap<u64, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for s in &symbols {
        let name = short_name(&s.name, &s.demangled).to_string();
        let e = by_addr.entry(s.addr.0).or_default();
        if matcher.matches_symbol(&s.name, &s.demangled) {
            if !e.0.contains(&name) {
                e.0.push(name);
            }
        } else if !e.1.contains(&name) {
            e.1.push(name);
        }
    }
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
        let name = matched.remove(0);
        let mut aliases = matched;
        aliases.extend(others);
        out.push(Target {
            name,
            aliases,
            kind: TargetKind::User {
                path: path.clone(),
                addr,
                offset,
            },
            fetches: Vec::new(),
        });
    }
    if out.is_empty() {
        return Err(ProbeError::NoMatch {
            what: "functions",
            pattern: pattern.to_string(),
            place: path.display().to_string(),
        });
    }
    Ok(out)
}

/// True when the ELF file is a Go binary (uretprobes crash Go programs).
pub fn is_go_binary(path: &Path) -> Result<bool, ProbeError> {
    Ok(elf_info(path)?.is_go)
}

/// Find a library as the dynamic loader would: `c` -> `libc.so.6`. A name with `/` is a path. With a pid, the
/// library the process has mapped wins; then `ldconfig -p`; then the usual directories and LD_LIBRARY_PATH.
pub fn find_library(name: &str, pid: Option<u32>) -> Result<PathBuf, ProbeError> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let stem = if name.starts_with("lib") {
        name.to_string()
    } else {
        format!("lib{name}")
    };
    let fits = |file: &str| {
        file == format!("{stem}.so")
            || file.starts_with(&format!("{stem}.so."))
            || file.starts_with(&format!("{stem}-"))
    };
    if let Some(pid) = pid {
        if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            for line in maps.lines() {
                if let Some(p) = line.split_whitespace().nth(5) {
                    let file = Path::new(p)
                        .file_name()
                        .and_then(|f| f.to_str())
                        .unwrap_or("");
                    if p.starts_with('/') && fits(file) {
                        return Ok(crate::process::root_path(pid, Path::new(p)));
                    }
                }
            }
        }
    }
    if let Ok(out) = std::process::Command::new("ldconfig").arg("-p").output() {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(p) = parse_ldconfig(&text, &stem) {
            return Ok(p);
        }
    }
    let mut dirs: Vec<PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|f| fits(f))
            .collect();
        // `libc.so` may be a linker script: prefer a versioned name.
        names.sort_by_key(|f| (f == &format!("{stem}.so"), f.clone()));
        if let Some(f) = names.first() {
            return Ok(d.join(f));
        }
    }
    Err(ProbeError::NoLibrary {
        name: name.to_string(),
    })
}

/// The x86-64 library `stem.so*` in `ldconfig -p` output.
pub fn parse_ldconfig(text: &str, stem: &str) -> Option<PathBuf> {
    let mut best: Option<(bool, PathBuf)> = None;
    for line in text.lines() {
        let line = line.trim();
        let Some((left, path)) = line.split_once(" => ") else {
            continue;
        };
        let file = left.split_whitespace().next().unwrap_or("");
        if !(file.starts_with(&format!("{stem}.so.")) || file == format!("{stem}.so")) {
            continue;
        }
        let x86_64 = left.contains("x86-64");
        if best.as_ref().is_none_or(|(b, _)| !*b && x86_64) {
            best = Some((x86_64, PathBuf::from(path.trim())));
        }
    }
    best.map(|(_, p)| p)
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
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that ldconfig output picks the x86-64 versioned library.
    #[test]
    fn ldconfig_lookup() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcrypt.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcrypt.so.1\n\
            \tlibc.so.6 (libc6) => /lib/i386-linux-gnu/libc.so.6\n\
            \tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
        assert_eq!(
            parse_ldconfig(text, "libc"),
            Some(PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"))
        );
        assert_eq!(parse_ldconfig(text, "libz"), None);
    }
}
