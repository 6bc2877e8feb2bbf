//! Turning the values a spec names (`arg1:str`, `len`, `ret`, `caller`) into each target's fetch arguments: by
//! x86-64 ABI position for functions, by DWARF parameter name where the binary has debug info (as perf probe
//! does), and by the argument specs of USDT notes.
use super::fetch::{Fetch, FetchItem, FetchType, TextLayout, ABI_REGS};
use crate::probe::target::{Target, TargetKind};
use crate::probe::ProbeError;
use crate::symbols::DebugSources;

fn spec_error(spec: &str, reason: String) -> ProbeError {
    ProbeError::Spec {
        spec: spec.to_string(),
        reason,
    }
}

const DEFAULT_INT: FetchType = FetchType::Int {
    size: 8,
    signed: true,
};

/// The `format` text of a tracefs event (`category`, `event`), when there is one.
pub type Formats<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// The fetch arguments of `target` for `items` (in order, each name once); `spec` is the spec as written, for
/// errors; `formats` gives the fields of tracepoints and syscalls; `debug` says where DWARF for parameter names
/// is found.
pub fn resolve_fetches(
    target: &Target,
    items: &[FetchItem],
    spec: &str,
    formats: Formats<'_>,
    debug: &DebugSources,
) -> Result<Vec<Fetch>, ProbeError> {
    let mut out: Vec<Fetch> = Vec::new();
    for item in items {
        if out.iter().any(|f| f.label == item.name) {
            continue;
        }
        if item.path().is_path() || item.array.is_some() {
            let first = out.len();
            let mut n = 0;
            let field = || {
                n += 1;
                format!("v{}", first + n - 1)
            };
            out.extend(path_fetches(target, item, debug, field).map_err(|e| spec_error(spec, e))?);
            continue;
        }
        let field = format!("v{}", out.len());
        match resolve_one(target, item, field, spec, formats, debug) {
            Ok(fetch) => out.push(fetch),
            // The process context (`comm`, `pid`...), unless the probe has a value of that name (whose error,
            // such as `pid:str` on a number, stands).
            Err(_) if item.ty.is_none() && super::filters::is_context(&item.name) => {}
            Err(e) => return Err(e),
        }
    }
    let sampled = out
        .iter()
        .filter(|f| f.source == super::fetch::FetchSource::Register)
        .count();
    if sampled > super::register::MAX_SAMPLED {
        let most = super::register::MAX_SAMPLED;
        return Err(spec_error(
            spec,
            format!("{sampled} registers: a software event's sample carries at most {most}"),
        ));
    }
    Ok(out)
}

/// The fetches of a value through pointers (`req->len`, `arg0->8`, `argv:str[4]`, `sp+8:str[4]`): user
/// functions only (this is user memory, read by the uprobe).
fn path_fetches(
    target: &Target,
    item: &FetchItem,
    debug: &DebugSources,
    field: impl FnMut() -> String,
) -> Result<Vec<Fetch>, String> {
    let TargetKind::User { path, addr, .. } = &target.kind else {
        return Err(format!(
            "`{}`: values through pointers are read by uprobes, in user functions; {} is a {}",
            item.name,
            target.name,
            kind_name(&target.kind)
        ));
    };
    if target.go.is_some() {
        return Err(format!(
            "`{}`: Go functions take arguments by position only",
            item.name
        ));
    }
    let base = item.path().base;
    let reg = if base == "sp" {
        "%sp".to_string()
    } else if let Some(n) = base.strip_prefix("arg").and_then(|n| n.parse().ok()) {
        abi_reg(n)?
    } else {
        let plain = FetchItem {
            name: base.to_string(),
            ty: None,
            array: None,
        };
        named_param(path, addr.0, &target.name, &plain, debug)?.0
    };
    super::deref::user_path_fetches(path, addr.0, &target.name, item, &reg, debug, field)
}

pub(super) fn resolve_one(
    target: &Target,
    item: &FetchItem,
    field: String,
    spec: &str,
    formats: Formats<'_>,
    debug: &DebugSources,
) -> Result<Fetch, ProbeError> {
    let err = |reason: String| spec_error(spec, reason);
    let what = kind_name(&target.kind);
    if let Some(reg) = item.register() {
        return register_fetch(target, item, reg, field).map_err(err);
    }
    if target.go.is_some() {
        return go_fetch(target, item, field, spec);
    }
    match &target.kind {
        TargetKind::Syscall { name } => return syscall_fetch(name, item, formats).map_err(err),
        TargetKind::Tracepoint { category, event } => {
            let format = formats(category, event)
                .ok_or_else(|| err(format!("no format for {category}:{event}")))?;
            let displays = crate::tracefs::field_displays(&format);
            let format = crate::tracefs::parse_format(&format);
            let fields = super::fields::value_fields(&format);
            let ev = format!("{category}:{event}");
            // `ret` is the event's own field where it has one (`sys_exit_read`'s).
            if item.is_ret() && !fields.iter().any(|f| f.name == "ret") {
                return Err(err(format!(
                    "`ret`: {ev} is a tracepoint; it has no return (and no field `ret`)"
                )));
            }
            // A syscall's tracepoint is read as the syscall's event: `argN` by position, pointers into the
            // process (their strings read as `syscall:NAME(ARG:str)` reads them), `ret` with its error's name.
            let syscall = super::sysno::tracepoint_syscall(category, event);
            let exit = syscall.is_some_and(|(_, exit)| exit);
            let mut fetch =
                super::fields::resolve(&fields, &displays, item, &ev, syscall.is_some(), exit)
                    .map_err(err)?;
            // The value of this one event, not of a return.
            fetch.on_return = false;
            return Ok(fetch);
        }
        _ => {}
    }
    if item.is_ret() {
        if !target.can_return() {
            return Err(err(format!(
                "`ret` needs a function: {} {what} has no return",
                target.name
            )));
        }
        return Ok(Fetch::new(
            "ret",
            field,
            "$retval",
            item.ty.unwrap_or(DEFAULT_INT),
            true,
        ));
    }
    if item.is_caller() {
        return match target.kind {
            TargetKind::User { .. } | TargetKind::Kernel { .. } => Ok(Fetch::caller(field)),
            _ => Err(err(format!(
                "`caller` needs a function entry: {} is a {what}",
                target.name
            ))),
        };
    }
    match &target.kind {
        TargetKind::User { path, addr, .. } => {
            let (base, ty, text) = match item.arg_index() {
                Some(n) => (
                    abi_reg(n).map_err(&err)?,
                    item.ty.unwrap_or(DEFAULT_INT),
                    None,
                ),
                None => named_param(path, addr.0, &target.name, item, debug).map_err(&err)?,
            };
            Ok(match text {
                Some(layout) => Fetch::text(&item.name, field, &base, &layout, false),
                None => Fetch::new(&item.name, field, &base, ty, false),
            })
        }
        TargetKind::Kernel { .. } => {
            let (base, ty) = match item.arg_index() {
                Some(n) => (abi_reg(n).map_err(&err)?, item.ty.unwrap_or(DEFAULT_INT)),
                None => kernel_param(&target.name, item).map_err(&err)?,
            };
            // `string` reads kernel memory, and user memory where the kernel's copy faults (6.1 and later).
            Ok(Fetch::new(&item.name, field, &base, ty, false))
        }
        TargetKind::Usdt { args, .. } => usdt_fetch(target, args, item, field).map_err(err),
        _ => Err(err(format!(
            "{} is a {what}: values can be fetched from functions and USDT probes only",
            target.name
        ))),
    }
}

/// A register (`%ip`) at a function's entry or a USDT probe, as the kernel's probe reads it there (unsigned 64
/// bits unless typed; `:str` reads the string it points to).
fn register_fetch(
    target: &Target,
    item: &FetchItem,
    reg: &str,
    field: String,
) -> Result<Fetch, String> {
    let ty = item.ty.unwrap_or(FetchType::Int {
        size: 8,
        signed: false,
    });
    let at_return = item.register_at_return();
    match &target.kind {
        TargetKind::User { .. } | TargetKind::Kernel { .. } => {
            Ok(Fetch::new(&item.name, field, &format!("%{reg}"), ty, at_return))
        }
        TargetKind::Usdt { .. } if !at_return => {
            Ok(Fetch::new(&item.name, field, &format!("%{reg}"), ty, false))
        }
        TargetKind::Software { .. } if !at_return && ty != FetchType::Str => {
            match super::register::perf_index(reg) {
                Some(_) => Ok(Fetch::sampled_register(&item.name, field, reg, ty)),
                None => Err(format!(
                    "`{}`: a sample carries no orig_ax (it is a syscall's number, read at its tracepoints)",
                    item.name
                )),
            }
        }
        _ => Err(format!(
            "`{}`: registers are read by uprobes, kprobes and USDT probes (`@ret`: at a function's return), \
             and as integers where a profile: or software: event fires; {} is a {}",
            item.name,
            target.name,
            kind_name(&target.kind)
        )),
    }
}

/// A USDT probe's argument `argN`: its fetch expression from the note's spec.
fn usdt_fetch(
    target: &Target,
    args: &[super::fetch::ArgSource],
    item: &FetchItem,
    field: String,
) -> Result<Fetch, String> {
    let Some(n) = item.arg_index() else {
        return Err(format!(
            "`{}`: USDT probes take arguments by position (arg0..arg{})",
            item.name,
            args.len().saturating_sub(1)
        ));
    };
    let Some(arg) = args.get(n) else {
        return Err(format!(
            "arg{n}: {} has {} argument(s) (arg0..arg{})",
            target.name,
            args.len(),
            args.len().saturating_sub(1)
        ));
    };
    let base = arg.base().map_err(|e| format!("arg{n}: {e}"))?;
    if item.ty == Some(FetchType::Str) && !arg.pointer_sized {
        return Err(format!(
            "arg{n} (`{}`) is not pointer-sized: it cannot be read as a string",
            arg.spec
        ));
    }
    let ty = item.ty.unwrap_or(arg.fetch_type());
    Ok(Fetch::new(&item.name, field, &base, ty, false))
}

/// A value of a syscall: an argument (by name or `argN`) from `sys_enter_NAME`, `ret` from `sys_exit_NAME`.
fn syscall_fetch(name: &str, item: &FetchItem, formats: Formats<'_>) -> Result<Fetch, String> {
    let (event, on_return) = match item.is_ret() {
        true => (format!("sys_exit_{name}"), true),
        false => (format!("sys_enter_{name}"), false),
    };
    let format =
        formats("syscalls", &event).ok_or_else(|| format!("no format for syscalls:{event}"))?;
    let displays = crate::tracefs::field_displays(&format);
    let format = crate::tracefs::parse_format(&format);
    let fields = super::fields::value_fields(&format);
    let ev = format!("syscall:{name}");
    super::fields::resolve(&fields, &displays, item, &ev, true, on_return)
}

/// The integer argument and result registers of Go's register ABI (amd64, Go 1.17 and later).
const GO_REGS: [&str; 9] = ["ax", "bx", "cx", "di", "si", "r8", "r9", "r10", "r11"];

/// A value of a Go function: `argN` in Go's register ABI at entry, `ret` (its first result) at each `ret`.
fn go_fetch(
    target: &Target,
    item: &FetchItem,
    field: String,
    spec: &str,
) -> Result<Fetch, ProbeError> {
    use crate::probe::spec::go::GoFunction;
    let err = |reason: String| spec_error(spec, reason);
    if target.go != Some(GoFunction::Timed) {
        return Err(err(format!(
            "{}: values of this Go function cannot be read (it is counted only)",
            target.name
        )));
    }
    let ty = item.ty.unwrap_or(DEFAULT_INT);
    if item.is_ret() {
        return Ok(Fetch::new("ret", field, "%ax", ty, true));
    }
    let Some(n) = item.arg_index() else {
        return Err(err(format!(
            "`{}`: Go functions take arguments by position (arg0..arg8, Go's register ABI)",
            item.name
        )));
    };
    let reg = GO_REGS.get(n).ok_or_else(|| {
        err(format!("arg{n} is past Go's 9 integer argument registers (arg0..arg8: rax, rbx, rcx, rdi, rsi, r8..r11)"))
    })?;
    if ty == FetchType::Str {
        return Err(err(format!(
            "arg{n}: a Go string is a pointer and a length in two registers; read it as arg{n} (the pointer) and arg{} (the length)",
            n + 1
        )));
    }
    Ok(Fetch::new(&item.name, field, &format!("%{reg}"), ty, false))
}

/// `%REG` of integer argument `n`.
fn abi_reg(n: usize) -> Result<String, String> {
    ABI_REGS.get(n).map(|r| format!("%{r}")).ok_or_else(|| {
        format!(
            "arg{n} is past the {} integer argument registers of x86-64 (arg0..arg5: rdi, rsi, rdx, rcx, r8, r9)",
            ABI_REGS.len()
        )
    })
}

fn kind_name(kind: &TargetKind) -> &'static str {
    match kind {
        TargetKind::User { .. } => "function",
        TargetKind::Kernel { .. } => "kernel function",
        TargetKind::Syscall { .. } => "syscall",
        TargetKind::Tracepoint { .. } => "tracepoint",
        TargetKind::Usdt { .. } => "USDT probe",
        TargetKind::Pair { .. } => "pair of probes",
        TargetKind::Software { .. } => "sampled perf event",
    }
}

/// A kernel function's parameter by name, from the kernel's BTF: its register and what to fetch. Kernels before
/// 6.6 take `$argN` and registers only, so the name becomes its position here.
fn kernel_param(func: &str, item: &FetchItem) -> Result<(String, FetchType), String> {
    use crate::symbols::btf::{kernel_params, KernelParamType, VMLINUX_BTF};
    let params = kernel_params(std::path::Path::new(VMLINUX_BTF), func)
        .map_err(|e| format!("`{}`: {e}", item.name))?;
    let Some(index) = params.iter().position(|p| p.name == item.name) else {
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "{func} has no parameter `{}` (its parameters: {})",
            item.name,
            names.join(", ")
        ));
    };
    if params[..=index]
        .iter()
        .any(|p| p.ty == KernelParamType::Other)
    {
        return Err(format!(
            "`{}`: {func} passes it or a parameter before it in memory or in several registers (a struct or a \
             float); use argN where you know the register",
            item.name
        ));
    }
    let ty = params[index].ty;
    let natural = match ty {
        KernelParamType::Int { size, signed } => FetchType::Int { size, signed },
        _ => FetchType::Hex { size: 8 },
    };
    if item.ty == Some(FetchType::Str) && !matches!(ty, KernelParamType::Pointer { .. }) {
        return Err(format!(
            "`{}` of {func} is not a pointer: it cannot be read as a string",
            item.name
        ));
    }
    Ok((abi_reg(index)?, item.ty.unwrap_or(natural)))
}

/// The register and type of the parameter `item` names, from the binary's DWARF, and where its text is when
/// it is read as a string (`:str`, by its type: C strings, libstdc++'s `std::string` and `std::string_view`).
fn named_param(
    path: &std::path::Path,
    addr: u64,
    func: &str,
    item: &FetchItem,
    debug: &DebugSources,
) -> Result<(String, FetchType, Option<TextLayout>), String> {
    use crate::symbols::params::{abi_register, function_params_in, ParamType};
    let params = function_params_in(path, addr, debug)
        .map_err(|e| format!("cannot read the parameters of {func}: {e}"))?
        .ok_or_else(|| {
            format!(
                "`{}`: {} has no DWARF for {func}, so parameters have no names; use arg0..arg5 or build with -g",
                item.name,
                path.display()
            )
        })?;
    let Some(index) = params.iter().position(|p| p.name == item.name) else {
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "{func} has no parameter `{}` (its parameters: {})",
            item.name,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    let param = &params[index];
    let reg = abi_register(&params, index).map_err(|e| format!("`{}`: {e}", item.name))?;
    let natural = match param.ty {
        ParamType::Int { size, signed } => FetchType::Int { size, signed },
        ParamType::Pointer { .. } => FetchType::Hex { size: 8 },
        _ => DEFAULT_INT,
    };
    let ty = item.ty.unwrap_or(natural);
    if ty != FetchType::Str {
        return Ok((format!("%{reg}"), ty, None));
    }
    let layout = text_layout(param, reg).ok_or_else(|| {
        let (a, ty) = (article(&param.type_name), &param.type_name);
        match param.ty {
            ParamType::Pointer { .. } => format!(
                "`{}` is {a} {ty}, not text: `:str` reads char pointers and libstdc++'s std::string and \
                 std::string_view (argN:str reads any pointer as a C string)",
                item.name
            ),
            _ => format!(
                "`{}` is {a} {ty}, not a pointer: it cannot be read as a string",
                item.name
            ),
        }
    })?;
    Ok((format!("%{reg}"), ty, Some(layout)))
}

/// Where the text of `param`, which arrives in register `reg`, is.
fn text_layout(param: &crate::symbols::params::Param, reg: &str) -> Option<TextLayout> {
    use crate::symbols::params::Text;
    Some(match param.text? {
        Text::Chars => TextLayout::Chars,
        Text::StringAt => TextLayout::StdString,
        Text::StringViewAt => TextLayout::StringViewAt,
        // The length in `reg`, the data pointer in the next argument register.
        Text::StringView => {
            let next = ABI_REGS.iter().position(|r| *r == reg)? + 1;
            TextLayout::StringView {
                data: format!("%{}", ABI_REGS.get(next)?),
            }
        }
    })
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}
