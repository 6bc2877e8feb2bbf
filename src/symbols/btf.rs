//! A kernel function's parameters from the kernel's BTF (`/sys/kernel/btf/vmlinux`): their names, and what a
//! probe fetches for each (size and sign of an integer, a pointer, a pointer to chars). Kernels before 6.6 take
//! kprobe arguments by register or `$argN` only, so rprof maps a name to its position itself.
use btf_rs::{Backend, Btf, Type};
use std::path::Path;

/// The kernel's BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// What a parameter holds, as far as a probe's fetch cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelParamType {
    Int {
        size: u8,
        signed: bool,
    },
    /// A pointer; `to_char`: to `char` (maybe const), which `:str` reads.
    Pointer {
        to_char: bool,
    },
    /// Passed in several registers or in memory (a struct by value, a float): not fetched by name.
    Other,
}

/// One parameter of a kernel function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelParam {
    pub name: String,
    pub ty: KernelParamType,
}

/// The parameters of kernel function `func`, in order, from the BTF at `path`. Errors name the file or the
/// function and what to write instead.
pub fn kernel_params(path: &Path, func: &str) -> Result<Vec<KernelParam>, String> {
    if !path.exists() {
        return Err(format!(
            "this kernel has no BTF ({} is missing), so kernel arguments have no names; use arg0..arg5",
            path.display()
        ));
    }
    // Mapped where sysfs allows it (it does not before 6.x: ENODEV), else read whole (about 5 MB).
    let btf = Btf::from_file_with_backend(path, Backend::Mmap)
        .or_else(|_| Btf::from_file_with_backend(path, Backend::Cache))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let types = btf.resolve_types_by_name(func).unwrap_or_default();
    let proto = types
        .iter()
        .find_map(|t| match t {
            Type::Func(f) => match btf.resolve_chained_type(f) {
                Ok(Type::FuncProto(p)) => Some(p),
                _ => None,
            },
            _ => None,
        })
        .ok_or_else(|| {
            format!(
                "{} does not describe a function {func}; use arg0..arg5",
                path.display()
            )
        })?;
    proto
        .parameters
        .iter()
        .filter(|p| !p.is_variadic())
        .map(|p| {
            let name = btf.resolve_name(p).unwrap_or_default();
            let ty = btf
                .resolve_chained_type(p)
                .map(|t| param_type(&btf, t))
                .unwrap_or(KernelParamType::Other);
            Ok(KernelParam { name, ty })
        })
        .collect()
}

/// The type under typedefs and qualifiers.
fn strip(btf: &Btf, mut t: Type) -> Type {
    for _ in 0..32 {
        let next = match &t {
            Type::Typedef(x) => btf.resolve_chained_type(x),
            Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => btf.resolve_chained_type(x),
            Type::TypeTag(x) => btf.resolve_chained_type(x),
            _ => return t,
        };
        match next {
            Ok(n) => t = n,
            Err(_) => return Type::Void,
        }
    }
    t
}

fn param_type(btf: &Btf, t: Type) -> KernelParamType {
    match strip(btf, t) {
        Type::Int(i) if (1..=8).contains(&i.size()) && i.size().is_power_of_two() => {
            KernelParamType::Int {
                size: i.size() as u8,
                signed: i.is_signed(),
            }
        }
        Type::Enum(e) => KernelParamType::Int {
            size: e.size().clamp(1, 8) as u8,
            signed: e.is_signed(),
        },
        Type::Ptr(p) => {
            let to = btf.resolve_chained_type(&p).map(|t| strip(btf, t)).ok();
            KernelParamType::Pointer {
                to_char: matches!(to, Some(Type::Int(i)) if i.size() == 1),
            }
        }
        _ => KernelParamType::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check the running kernel's `do_sys_openat2(int dfd, const char __user *filename, struct open_how *how)`
    /// (every kernel since 5.6 has it), and the errors for a missing function and a missing file.
    #[test]
    fn do_sys_openat2_from_the_running_kernel() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            eprintln!("SKIPPED do_sys_openat2_from_the_running_kernel: {VMLINUX_BTF} is missing");
            return;
        }
        let params = kernel_params(path, "do_sys_openat2").unwrap();
        assert_eq!(
            params,
            [
                KernelParam {
                    name: "dfd".into(),
                    ty: KernelParamType::Int {
                        size: 4,
                        signed: true
                    }
                },
                KernelParam {
                    name: "filename".into(),
                    ty: KernelParamType::Pointer { to_char: true }
                },
                KernelParam {
                    name: "how".into(),
                    ty: KernelParamType::Pointer { to_char: false }
                },
            ]
        );
        let e = kernel_params(path, "no_such_function_rprof").unwrap_err();
        assert!(
            e.contains("does not describe a function no_such_function_rprof"),
            "{e}"
        );
        let e = kernel_params(Path::new("/nonexistent/vmlinux"), "f").unwrap_err();
        assert!(e.contains("no BTF") && e.contains("arg0..arg5"), "{e}");
    }
}
