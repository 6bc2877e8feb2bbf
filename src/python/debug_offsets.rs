//! CPython 3.13's `_Py_DebugOffsets` (Include/internal/pycore_runtime.h): the first field of `_PyRuntime`, a
//! cookie (`xdebugpy`), the version (`PY_VERSION_HEX`) and the offsets of the fields an out-of-process reader
//! needs, written by the interpreter itself. Its own layout is stable between patch versions of one minor
//! version only: rprof reads the struct of 3.13 (584 bytes, all `uint64_t`) and no other, after checking the
//! cookie and the version it holds.
use super::layout::{Current, Layout, StrLayout};
use super::memory::u64_at;
use super::threads;

/// How many bytes of `_PyRuntime` hold 3.13's `_Py_DebugOffsets`.
pub const SIZE_3_13: usize = 584;
const COOKIE: &[u8; 8] = b"xdebugpy";
/// The largest offset believed: CPython's structures are smaller (`PyInterpreterState` is ~190 KiB; the
/// fields rprof reads sit in its first 8 KiB); a larger figure is not debug offsets.
const MAX_OFFSET: u64 = 1 << 20;

/// Why a process's debug offsets were not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DebugOffsetsError {
    #[error("_PyRuntime does not start with the debug offsets' cookie \"xdebugpy\"")]
    Cookie,
    #[error("the debug offsets are of version {0:#x}, not of the 3.13 struct rprof reads")]
    Version(u64),
    #[error("a free-threaded build (its objects differ; rprof reads the default build)")]
    FreeThreaded,
    #[error("the debug offsets hold an implausible offset ({0} = {1:#x})")]
    Implausible(&'static str, u64),
}

/// The layout of a 3.13 process, from the first [`SIZE_3_13`] bytes of its `_PyRuntime`.
pub fn layout_3_13(bytes: &[u8]) -> Result<Layout, DebugOffsetsError> {
    if bytes.get(..8) != Some(COOKIE.as_slice()) {
        return Err(DebugOffsetsError::Cookie);
    }
    let at = |i: usize| u64_at(bytes, 8 * i);
    let version = at(1);
    if version >> 16 != 0x030d {
        return Err(DebugOffsetsError::Version(version));
    }
    if at(2) != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    // The index of each uint64_t in the struct (3.13.0's header; the same through 3.13.x).
    let named = [
        ("runtime_state.interpreters_head", 5),
        ("interpreter_state.next", 8),
        ("interpreter_state.threads_head", 9),
        ("interpreter_state.imports_modules", 11),
        ("thread_state.next", 21),
        ("thread_state.current_frame", 23),
        ("thread_state.native_thread_id", 25),
        ("interpreter_frame.previous", 29),
        ("interpreter_frame.executable", 30),
        ("interpreter_frame.instr_ptr", 31),
        ("interpreter_frame.owner", 33),
        ("code_object.filename", 35),
        ("code_object.qualname", 37),
        ("code_object.linetable", 38),
        ("code_object.firstlineno", 39),
        ("code_object.co_code_adaptive", 43),
        ("bytes_object.ob_size", 65),
        ("bytes_object.ob_sval", 66),
        ("unicode_object.state", 68),
        ("unicode_object.length", 69),
        ("unicode_object.asciiobject_size", 70),
    ];
    let mut v = [0u64; 21];
    for (slot, (name, index)) in v.iter_mut().zip(named) {
        *slot = at(index);
        if *slot > MAX_OFFSET {
            return Err(DebugOffsetsError::Implausible(name, *slot));
        }
    }
    let [interpreters_head, interp_next, threads_head, modules, tstate_next, current_frame, native_thread_id, f_previous, f_executable, f_instr, f_owner, co_filename, co_qualname, co_linetable, co_firstlineno, co_code, bytes_size, bytes_data, str_state, str_length, ascii_size] =
        v;
    let u = |x: u64| x as usize;
    let max = |xs: &[u64]| u(xs.iter().copied().max().unwrap_or(0)) + 8;
    Ok(Layout {
        runtime_interpreters_head: interpreters_head,
        interp_next,
        interp_threads_head: threads_head,
        interp_modules: modules,
        tstate_next: u(tstate_next),
        tstate_native_thread_id: u(native_thread_id),
        current: Current::Direct {
            tstate_current_frame: u(current_frame),
        },
        tstate_read: max(&[tstate_next, current_frame, native_thread_id]),
        frame_code: u(f_executable),
        frame_previous: u(f_previous),
        frame_instr: u(f_instr),
        frame_owner: u(f_owner),
        frame_is_entry: None,
        frame_read: max(&[f_executable, f_previous, f_instr, f_owner]),
        code_filename: u(co_filename),
        code_qualname: u(co_qualname),
        code_first_line: u(co_firstlineno),
        code_linetable: u(co_linetable),
        code_code: co_code,
        code_read: max(&[co_filename, co_qualname, co_linetable, co_firstlineno]),
        str: StrLayout {
            length: u(str_length),
            state: u(str_state),
            ascii_data: ascii_size,
            // PyCompactUnicodeObject: the ASCII object, then utf8_length and utf8.
            compact_data: ascii_size + 16,
        },
        bytes_size,
        bytes_data,
        // Not among the debug offsets: 3.13's, checked with gdb on pyenv's 3.13.0.
        thread_names: threads::V3_13,
    })
}

#[cfg(test)]
mod tests {
    use super::{layout_3_13, DebugOffsetsError, SIZE_3_13};
    use crate::python::layout::{Current, Layout, StrLayout};
    use object::{Object, ObjectSection, ObjectSymbol};

    /// 3.13.0's offsets as gdb prints them from the pyenv 3.13.0 build's DWARF (`print
    /// &((PyThreadState *)0)->current_frame`, `ptype/o struct _PyInterpreterFrame`, `sizeof(PyASCIIObject)`,
    /// ...), which are also what its `_PyRuntime.debug_offsets` holds.
    const DWARF_3_13_0: Layout = Layout {
        runtime_interpreters_head: 0x278,
        interp_next: 0x1c60,
        interp_threads_head: 0x1cb0,
        interp_modules: 0x1de8,
        tstate_next: 8,
        tstate_native_thread_id: 0xa0,
        current: Current::Direct {
            tstate_current_frame: 0x48,
        },
        tstate_read: 0xa8,
        frame_code: 0,
        frame_previous: 8,
        frame_instr: 56,
        frame_owner: 70,
        frame_is_entry: None,
        frame_read: 78,
        code_filename: 0x70,
        code_qualname: 0x80,
        code_first_line: 0x44,
        code_linetable: 0x88,
        code_code: 0xc8,
        code_read: 0x90,
        str: StrLayout {
            length: 16,
            state: 32,
            ascii_data: 40,
            compact_data: 56,
        },
        bytes_size: 16,
        bytes_data: 32,
        thread_names: crate::python::threads::V3_13,
    };

    /// The initial bytes of `_PyRuntime` in a libpython file (its `.data`).
    fn runtime_bytes(path: &str) -> Option<Vec<u8>> {
        let data = std::fs::read(path).ok()?;
        let elf = object::File::parse(&*data).ok()?;
        let sym = elf
            .dynamic_symbols()
            .find(|s| s.name() == Ok("_PyRuntime"))?;
        let section = elf.section_by_index(sym.section_index()?).ok()?;
        let bytes = section.data_range(sym.address(), SIZE_3_13 as u64).ok()??;
        Some(bytes.to_vec())
    }

    /// Check the reader on the debug offsets the pyenv 3.13.0 build carries in its file (the process's copy
    /// starts as this one): they give the offsets of the build's DWARF.
    #[test]
    fn reads_the_builds_debug_offsets() {
        let lib = "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0";
        let Some(bytes) = runtime_bytes(lib) else {
            eprintln!("SKIP reads_the_builds_debug_offsets: {lib} is not installed");
            return;
        };
        assert_eq!(layout_3_13(&bytes), Ok(DWARF_3_13_0));
    }

    /// Check that another cookie, another minor version and a free-threaded build are refused.
    #[test]
    fn refuses_what_it_does_not_know() {
        let mut bytes = vec![0u8; SIZE_3_13];
        bytes[..8].copy_from_slice(b"xdebugpy");
        bytes[8..16].copy_from_slice(&0x030d_00f0u64.to_le_bytes());
        assert!(layout_3_13(&bytes).is_ok());
        bytes[8..16].copy_from_slice(&0x030e_00f0u64.to_le_bytes());
        assert_eq!(
            layout_3_13(&bytes),
            Err(DebugOffsetsError::Version(0x030e_00f0))
        );
        bytes[8..16].copy_from_slice(&0x030d_05f0u64.to_le_bytes());
        bytes[16] = 1;
        assert_eq!(layout_3_13(&bytes), Err(DebugOffsetsError::FreeThreaded));
        bytes[16] = 0;
        bytes[5 * 8..6 * 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            layout_3_13(&bytes),
            Err(DebugOffsetsError::Implausible(..))
        ));
        bytes[0] = b'y';
        assert_eq!(layout_3_13(&bytes), Err(DebugOffsetsError::Cookie));
        assert_eq!(layout_3_13(&[]), Err(DebugOffsetsError::Cookie));
    }
}
