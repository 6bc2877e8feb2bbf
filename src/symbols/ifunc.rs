//! IFUNC symbols (STT_GNU_IFUNC): a name whose address is a resolver, which the dynamic linker calls once to
//! pick the implementation for this CPU (`strlen` is `__strlen_evex` on an AVX-512 machine, `__strlen_avx2` on
//! others). A probe at the IFUNC's address would count the resolver's one or two calls (bpftrace and perf
//! probe do that), so `probe` asks the dynamic linker what each name resolves to, in a helper process: rprof
//! run again as `rprof __resolve-ifuncs LIB NAME...`, which `dlopen`s the library and `dlsym`s each name
//! ([`crate::dl`]). The library's constructors and resolvers run in that child only, never in rprof.
//! An executable (a program's own IFUNCs, a static binary's libc) cannot be `dlopen`ed: its IFUNCs stay
//! unresolved rather than running the program's code.
use super::elf::{dynamic_ifuncs, ElfData};
use super::SymbolError;
use crate::addr::ElfAddr;
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// The first argument that makes rprof the IFUNC helper.
pub const HELPER_ARG: &str = "__resolve-ifuncs";

/// An exported IFUNC of a library and, when the helper could tell, the implementation it resolves to here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ifunc {
    pub name: String,
    /// The IFUNC symbol's own address: its resolver's code.
    pub resolver: ElfAddr,
    /// What the name resolves to on this CPU, in the same file.
    pub target: Option<ElfAddr>,
}

/// The IFUNCs exported by `path` (its .dynsym), unresolved, sorted by name.
pub fn ifunc_symbols(path: &Path) -> Result<Vec<Ifunc>, SymbolError> {
    let data = ElfData::read(path)?;
    let file = data.parse(path)?;
    let mut out: Vec<Ifunc> = dynamic_ifuncs(&file)
        .into_iter()
        .map(|s| Ifunc {
            name: s.name,
            resolver: ElfAddr(s.addr),
            target: None,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    Ok(out)
}

/// Why IFUNCs could not be resolved.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve the IFUNCs of {path} ({reason}); probe their implementations by name (`-l '*strlen*'` lists them)")]
pub struct IfuncError {
    pub path: std::path::PathBuf,
    pub reason: String,
}

/// Resolve `ifuncs` of `path` in the helper process (`exe`: rprof's own binary), filling their targets.
pub fn resolve_ifuncs(exe: &Path, path: &Path, ifuncs: &mut [Ifunc]) -> Result<(), IfuncError> {
    let fail = |reason: String| IfuncError {
        path: path.to_path_buf(),
        reason,
    };
    if ifuncs.is_empty() {
        return Ok(());
    }
    let out = Command::new(exe)
        .arg(HELPER_ARG)
        .arg(path)
        .args(ifuncs.iter().map(|f| &f.name))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| fail(format!("cannot run {}: {e}", exe.display())))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(fail(format!("{}: {}", out.status, err.trim())));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        let Some((name, addr)) = line.split_once('\t') else {
            continue;
        };
        let Some(addr) = addr
            .strip_prefix("0x")
            .and_then(|a| u64::from_str_radix(a, 16).ok())
        else {
            continue;
        };
        for f in ifuncs.iter_mut().filter(|f| f.name == name) {
            f.target = Some(ElfAddr(addr));
        }
    }
    Ok(())
}

/// The helper's work (`rprof __resolve-ifuncs LIB NAME...`): one `NAME<TAB>0xADDR` line per name that
/// resolves inside LIB (`NAME<TAB>-` otherwise), for the caller to print.
pub fn helper(args: &[OsString]) -> Result<String, IfuncError> {
    let Some((lib, names)) = args.split_first() else {
        return Err(IfuncError {
            path: Default::default(),
            reason: format!("usage: rprof {HELPER_ARG} LIB NAME..."),
        });
    };
    let names: Vec<String> = names
        .iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let lib = Path::new(lib);
    let resolved = crate::dl::resolve(lib, &names).map_err(|reason| IfuncError {
        path: lib.to_path_buf(),
        reason,
    })?;
    Ok(resolved
        .into_iter()
        .map(|(name, addr)| match addr {
            Some(a) => format!("{name}\t{a:#x}\n"),
            None => format!("{name}\t-\n"),
        })
        .collect())
}
