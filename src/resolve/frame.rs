//! A resolved frame ([`FrameInfo`]), and how each output spells it: the table names unnamed code by its
//! address (`perl+0x1966db`, as perf lists it) so that no row of many addresses ranks as one function, and
//! folded stacks name it by its module (`[perl]`), as inferno's and FlameGraph's collapsers do.
use crate::symbols::Unnamed;
use std::path::Path;

/// A frame as printed: a function (or `[unknown]`) in a module.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameInfo {
    /// The function name; `[unknown]` for code without a name.
    pub name: String,
    /// The module's file name (`[kernel.kallsyms]` for the kernel).
    pub module: String,
    pub kernel: bool,
    /// The name as the binary stores it (mangled), when it differs from `name`.
    pub system_name: Option<String>,
    /// Why the frame has no name and which code it stands for (None for named frames).
    pub unnamed: Option<UnnamedFrame>,
    /// The function was inlined into the frame before it in the stack (at the same address).
    pub inlined: bool,
}

/// Code without a name: why, and where.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnnamedFrame {
    pub cause: Unnamed,
    pub code: UnnamedCode,
}

/// The code an unnamed frame stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnnamedCode {
    /// One address, as a file offset of the module (what `perf script` prints for it).
    Offset(u64),
    /// The file offsets of the code the module's unwind tables bound around the sampled addresses (an
    /// `.eh_frame` FDE: about one function).
    Range(u64, u64),
    /// One absolute address (the kernel's, or one in no file).
    Address(u64),
}

impl FrameInfo {
    /// A named frame of `module` without a system name (a Python function, a JIT's).
    pub fn named(name: String, module: String) -> FrameInfo {
        FrameInfo {
            name,
            module,
            kernel: false,
            system_name: None,
            unnamed: None,
            inlined: false,
        }
    }

    /// An unnamed frame of `module`.
    pub fn unnamed(module: String, kernel: bool, cause: Unnamed, code: UnnamedCode) -> FrameInfo {
        FrameInfo {
            name: "[unknown]".into(),
            module,
            kernel,
            system_name: None,
            unnamed: Some(UnnamedFrame { cause, code }),
            inlined: false,
        }
    }

    /// The frame's name in the table: its function, or for unnamed code its address (`perl+0x1966db`,
    /// `0xffffffff8123abcd`); a range of code says how many sampled addresses it holds when more than one
    /// (`perl+0x196600..0x196780 (3 addresses)`).
    pub fn table_name(&self, addresses: u32) -> String {
        let Some(unnamed) = &self.unnamed else {
            return self.name.clone();
        };
        let count = match addresses {
            0 | 1 => String::new(),
            n => format!(" ({n} addresses)"),
        };
        match unnamed.code {
            UnnamedCode::Offset(at) => format!("{}+{at:#x}", self.module),
            UnnamedCode::Range(start, end) => {
                format!("{}+{start:#x}..{end:#x}{count}", self.module)
            }
            UnnamedCode::Address(at) => format!("{at:#x}"),
        }
    }
}

/// How folded stacks and stack listings spell a frame: its name, or for unnamed code `[module]` (`[unknown]`
/// when the module is not known either), as inferno-collapse-perf and stackcollapse-perf.pl write what perf
/// script prints as `[unknown] (module)`. `;` would split the frame, so it becomes `:`.
pub fn folded_name(frame: &FrameInfo) -> String {
    let name = match (frame.name == "[unknown]", frame.module.as_str()) {
        (true, "[unknown]") => "[unknown]".to_string(),
        (true, super::UPROBES) => super::UPROBES.to_string(),
        (true, module) => format!("[{module}]"),
        (false, _) => frame.name.clone(),
    };
    name.replace(';', ":")
}

/// Mappings whose code may be JIT code named in `/tmp/perf-PID.map`: anonymous memory (`//anon` as perf names
/// it, `[anon:NAME]` named by prctl, empty in /proc/PID/maps), memfd files and deleted files.
pub fn is_jit_like(path: &str) -> bool {
    path.is_empty()
        || path.starts_with("//anon")
        || path.starts_with("[anon:")
        || path.starts_with("/memfd:")
        || path.ends_with(" (deleted)")
}

/// The file name of a path (what reports show as the object).
pub(crate) fn short_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that JIT-like mapping names are told from files.
    #[test]
    fn jit_like_paths() {
        for p in [
            "//anon",
            "[anon:v8]",
            "/memfd:jit (deleted)",
            "/tmp/x.so (deleted)",
            "",
        ] {
            assert!(is_jit_like(p), "{p}");
        }
        for p in ["/usr/lib/libc.so.6", "[vdso]", "[heap]"] {
            assert!(!is_jit_like(p), "{p}");
        }
    }

    /// Check that unnamed code is named by its address in the table, by its module in folded stacks (as
    /// inferno-collapse-perf names it), and that a range of several addresses says how many.
    #[test]
    fn unnamed_names() {
        let at = |code| FrameInfo::unnamed("perl".into(), false, Unnamed::Stripped, code);
        assert_eq!(
            at(UnnamedCode::Offset(0x1966db)).table_name(1),
            "perl+0x1966db"
        );
        assert_eq!(
            at(UnnamedCode::Range(0x196600, 0x196780)).table_name(3),
            "perl+0x196600..0x196780 (3 addresses)"
        );
        assert_eq!(
            at(UnnamedCode::Range(0x196600, 0x196780)).table_name(1),
            "perl+0x196600..0x196780"
        );
        assert_eq!(folded_name(&at(UnnamedCode::Offset(1))), "[perl]");
        let nowhere = FrameInfo::unnamed(
            "[unknown]".into(),
            false,
            Unnamed::NoMapping,
            UnnamedCode::Address(0x10),
        );
        assert_eq!(folded_name(&nowhere), "[unknown]");
        assert_eq!(nowhere.table_name(1), "0x10");
    }
}
