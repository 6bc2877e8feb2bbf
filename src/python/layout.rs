//! The offsets of the CPython structures rprof reads, per version (x86-64). 3.11's and 3.12's come from their
//! headers (Include/internal/pycore_runtime.h, pycore_interp.h, cpython/pystate.h, pycore_frame.h,
//! cpython/code.h, cpython/unicodeobject.h) and were checked with gdb (`ptype/o`) against the pyenv 3.11.7 and
//! 3.12.1 builds' DWARF (the unit test below holds gdb's figures); 3.11's also by reading Debian's 3.11.2
//! (tests/python_stacks.rs). 3.13 and later carry their own offsets in the process ([`super::debug_offsets`]).

use super::threads::{self, NameLayout};

/// Where the fields rprof reads sit in one CPython version's structures (x86-64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// `PyInterpreterState.next`, `.threads.head`.
    pub interp_next: u64,
    pub interp_threads_head: u64,
    /// `PyInterpreterState.modules` (3.11), `.imports.modules` (3.12, 3.13): `sys.modules`.
    pub interp_modules: u64,
    /// `PyThreadState.next`.
    pub tstate_next: usize,
    /// `PyThreadState.native_thread_id` (the OS thread id).
    pub tstate_native_thread_id: usize,
    /// Where the thread's current interpreter frame is found.
    pub current: Current,
    /// How many bytes of a `PyThreadState` to read to have the fields above.
    pub tstate_read: usize,
    /// `_PyInterpreterFrame.f_code` (3.13: `f_executable`), `.previous`, `.prev_instr` (3.13: `instr_ptr`),
    /// `.owner`.
    pub frame_code: usize,
    pub frame_previous: usize,
    pub frame_instr: usize,
    pub frame_owner: usize,
    /// `_PyInterpreterFrame.is_entry` (3.11). None: the version marks the start of each evaluator call with a
    /// shim frame of owner [`FRAME_OWNED_BY_CSTACK`] instead (3.12 and later).
    pub frame_is_entry: Option<usize>,
    pub frame_read: usize,
    /// `PyCodeObject.co_filename`, `.co_qualname`, `.co_firstlineno`, `.co_linetable`, `.co_code_adaptive`.
    pub code_filename: usize,
    pub code_qualname: usize,
    pub code_first_line: usize,
    pub code_linetable: usize,
    pub code_code: u64,
    pub code_read: usize,
    pub str: StrLayout,
    /// `PyBytesObject.ob_size` and `.ob_sval`.
    pub bytes_size: u64,
    pub bytes_data: u64,
    /// Where `threading`'s thread names are read ([`super::threads`]).
    pub thread_names: NameLayout,
}

/// Where a thread's current interpreter frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Current {
    /// 3.11, 3.12: `PyThreadState.cframe`, a `_PyCFrame *` that lives on the C stack of
    /// `_PyEval_EvalFrameDefault`, and its `current_frame` and `previous`.
    CFrame {
        tstate_cframe: usize,
        current_frame: u64,
        previous: u64,
    },
    /// 3.13: `PyThreadState.current_frame`.
    Direct { tstate_current_frame: usize },
}

/// `PyASCIIObject.length`, `.state`, and where a compact string's characters start (ASCII / other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StrLayout {
    pub length: usize,
    pub state: usize,
    pub ascii_data: u64,
    pub compact_data: u64,
}

/// `_PyInterpreterFrame.owner` of the frame `_PyEval_EvalFrameDefault` keeps on its C stack at the start of
/// each call (3.12 and later): not a Python function's frame.
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// CPython 3.11.
pub const V3_11: Layout = Layout {
    runtime_interpreters_head: 0x28,
    interp_next: 0,
    interp_threads_head: 0x10,
    interp_modules: 0x378,
    tstate_next: 0x8,
    tstate_native_thread_id: 0xa0,
    current: Current::CFrame {
        tstate_cframe: 0x38,
        current_frame: 0x8,
        previous: 0x10,
    },
    tstate_read: 0xa8,
    frame_code: 0x20,
    frame_previous: 0x30,
    frame_instr: 0x38,
    frame_owner: 0x45,
    frame_is_entry: Some(0x44),
    frame_read: 0x48,
    code_filename: 0x70,
    code_qualname: 0x80,
    code_first_line: 0x48,
    code_linetable: 0x88,
    code_code: 0xb8,
    code_read: 0x90,
    str: StrLayout {
        length: 0x10,
        state: 0x20,
        ascii_data: 48,
        compact_data: 72,
    },
    bytes_size: 0x10,
    bytes_data: 0x20,
    thread_names: threads::V3_11,
};

/// CPython 3.12: 3.11's way (`cframe->current_frame`); `_PyCFrame` lost `use_tracing`, the frame its
/// `is_entry` (an entry frame on the C stack instead), `PyASCIIObject` its `wstr`.
pub const V3_12: Layout = Layout {
    runtime_interpreters_head: 0x28,
    interp_next: 0,
    interp_threads_head: 0x48,
    interp_modules: 0x3b0,
    tstate_next: 0x8,
    tstate_native_thread_id: 0x90,
    current: Current::CFrame {
        tstate_cframe: 0x38,
        current_frame: 0,
        previous: 0x8,
    },
    tstate_read: 0x98,
    frame_code: 0,
    frame_previous: 0x8,
    frame_instr: 0x38,
    frame_owner: 0x46,
    frame_is_entry: None,
    frame_read: 0x48,
    code_filename: 0x70,
    code_qualname: 0x80,
    code_first_line: 0x44,
    code_linetable: 0x88,
    code_code: 0xc0,
    code_read: 0x90,
    str: StrLayout {
        length: 0x10,
        state: 0x20,
        ascii_data: 40,
        compact_data: 56,
    },
    bytes_size: 0x10,
    bytes_data: 0x20,
    thread_names: threads::V3_12,
};

/// How rprof reads CPython `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// A table of offsets rprof carries.
    Table(&'static Layout),
    /// The `_Py_DebugOffsets` at the start of `_PyRuntime`, of the struct layout of that minor version.
    DebugOffsets,
}

/// How rprof reads CPython `major.minor`, if it can.
pub fn of_version(major: u32, minor: u32) -> Option<Reader> {
    match (major, minor) {
        (3, 11) => Some(Reader::Table(&V3_11)),
        (3, 12) => Some(Reader::Table(&V3_12)),
        (3, 13) => Some(Reader::DebugOffsets),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{Current, Layout, V3_11, V3_12};
    use std::process::Command;

    /// The offsets gdb finds in a build's DWARF for `exprs` (`&((T *)0)->field`, `sizeof(T)`), in order.
    fn gdb_values(lib: &str, exprs: &[String]) -> Vec<u64> {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx"]);
        for e in exprs {
            gdb.arg("-ex").arg(format!("print {e}"));
        }
        let out = gdb.arg(lib).output().expect("run gdb");
        let text = String::from_utf8_lossy(&out.stdout);
        let values: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with('$'))
            .map(|l| {
                let v = l.rsplit(' ').next().unwrap_or_default();
                match v.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
                    None => v.parse().unwrap(),
                }
            })
            .collect();
        assert_eq!(values.len(), exprs.len(), "gdb on {lib}:\n{text}");
        values
    }

    /// Each offset of a table next to the gdb expression that gives it.
    fn fields(l: &Layout) -> Vec<(String, u64)> {
        let field = |t: &str, f: &str| format!("(unsigned long)&(({t} *)0)->{f}");
        let Current::CFrame {
            tstate_cframe,
            current_frame,
            previous,
        } = l.current
        else {
            panic!("a table's versions have _PyCFrame");
        };
        let mut v = vec![
            (
                field("struct pyruntimestate", "interpreters.head"),
                l.runtime_interpreters_head,
            ),
            (field("PyInterpreterState", "next"), l.interp_next),
            (
                field("PyInterpreterState", "threads.head"),
                l.interp_threads_head,
            ),
            (field("PyThreadState", "next"), l.tstate_next as u64),
            (
                field("PyThreadState", "native_thread_id"),
                l.tstate_native_thread_id as u64,
            ),
            (field("PyThreadState", "cframe"), tstate_cframe as u64),
            (field("_PyCFrame", "current_frame"), current_frame),
            (field("_PyCFrame", "previous"), previous),
            (field("_PyInterpreterFrame", "f_code"), l.frame_code as u64),
            (
                field("_PyInterpreterFrame", "previous"),
                l.frame_previous as u64,
            ),
            (
                field("_PyInterpreterFrame", "prev_instr"),
                l.frame_instr as u64,
            ),
            (field("_PyInterpreterFrame", "owner"), l.frame_owner as u64),
            (field("PyCodeObject", "co_filename"), l.code_filename as u64),
            (field("PyCodeObject", "co_qualname"), l.code_qualname as u64),
            (
                field("PyCodeObject", "co_firstlineno"),
                l.code_first_line as u64,
            ),
            (
                field("PyCodeObject", "co_linetable"),
                l.code_linetable as u64,
            ),
            (field("PyCodeObject", "co_code_adaptive"), l.code_code),
            (field("PyASCIIObject", "length"), l.str.length as u64),
            (field("PyASCIIObject", "state"), l.str.state as u64),
            ("sizeof(PyASCIIObject)".into(), l.str.ascii_data),
            ("sizeof(PyCompactUnicodeObject)".into(), l.str.compact_data),
            (field("PyBytesObject", "ob_base.ob_size"), l.bytes_size),
            (field("PyBytesObject", "ob_sval"), l.bytes_data),
        ];
        v.push((
            field("PyHeapTypeObject", "ht_cached_keys"),
            l.thread_names.type_cached_keys,
        ));
        v.push((
            field("_PyInterpreterFrame", "localsplus"),
            l.thread_names.frame_localsplus,
        ));
        if let Some(is_entry) = l.frame_is_entry {
            v.push((field("_PyInterpreterFrame", "is_entry"), is_entry as u64));
        }
        v
    }

    /// Check the tables against the DWARF of pyenv's 3.11.7 and 3.12.1 builds (gdb `print &((T *)0)->field`),
    /// field by field, and that each read covers its fields. Where a build (or gdb) is absent, says so.
    #[test]
    fn tables_match_the_builds_dwarf() {
        for (lib, l, modules) in [
            (
                "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
                V3_11,
                "modules",
            ),
            (
                "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
                V3_12,
                "imports.modules",
            ),
        ] {
            if !std::path::Path::new(lib).exists()
                || Command::new("gdb").arg("--version").output().is_err()
            {
                eprintln!("SKIP tables_match_the_builds_dwarf: {lib} or gdb is not installed");
                continue;
            }
            let mut want = fields(&l);
            want.push((
                format!("(unsigned long)&((PyInterpreterState *)0)->{modules}"),
                l.interp_modules,
            ));
            let exprs: Vec<String> = want.iter().map(|(e, _)| e.clone()).collect();
            let got = gdb_values(lib, &exprs);
            for ((expr, table), dwarf) in want.iter().zip(got) {
                assert_eq!(*table, dwarf, "{lib}: {expr}");
            }
            assert!(l.tstate_read >= l.tstate_native_thread_id + 8);
            assert!(l.frame_read > l.frame_owner.max(l.frame_instr + 7));
            assert!(l.code_read >= l.code_linetable.max(l.code_qualname).max(l.code_filename) + 8);
        }
    }

    /// Check the offsets the main thread's name is read through that are the same in 3.11 to 3.13
    /// (`PyModuleObject.md_dict`, `PyTypeObject.tp_name`) against pyenv's 3.11.7, 3.12.1 and 3.13.0 builds.
    #[test]
    fn module_offsets_match_the_builds_dwarf() {
        use crate::python::threads::{MODULE_DICT, TYPE_NAME};
        for lib in [
            "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0",
            "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
            "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0",
        ] {
            if !std::path::Path::new(lib).exists()
                || Command::new("gdb").arg("--version").output().is_err()
            {
                eprintln!(
                    "SKIP module_offsets_match_the_builds_dwarf: {lib} or gdb is not installed"
                );
                continue;
            }
            let exprs = [
                "(unsigned long)&((PyModuleObject *)0)->md_dict".to_string(),
                "(unsigned long)&((PyTypeObject *)0)->tp_name".to_string(),
            ];
            assert_eq!(gdb_values(lib, &exprs), [MODULE_DICT, TYPE_NAME], "{lib}");
        }
    }
}
