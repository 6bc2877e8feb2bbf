//! The offsets of the CPython structures rprof reads, per version. 3.11's come from its headers
//! (Include/internal/pycore_runtime.h, pycore_interp.h, cpython/pystate.h, pycore_frame.h, cpython/code.h,
//! cpython/unicodeobject.h) for x86-64, and were checked with gdb against the pyenv 3.11.7 build's DWARF and by
//! reading Debian's 3.11.2 (tests/python_stacks.rs).

/// Where the fields rprof reads sit in one CPython version's structures (x86-64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters_head: u64,
    /// `PyInterpreterState.threads.head`.
    pub interp_threads_head: u64,
    /// `PyThreadState.next`.
    pub tstate_next: usize,
    /// `PyThreadState.cframe` (a `_PyCFrame *`, which lives on the C stack of `_PyEval_EvalFrameDefault`).
    pub tstate_cframe: usize,
    /// `PyThreadState.native_thread_id` (the OS thread id).
    pub tstate_native_thread_id: usize,
    /// How many bytes of a `PyThreadState` to read to have the fields above.
    pub tstate_read: usize,
    /// `_PyCFrame.current_frame`, `.previous`.
    pub cframe_current_frame: u64,
    pub cframe_previous: u64,
    /// `_PyInterpreterFrame.f_code`, `.previous`, `.prev_instr`, `.is_entry`, `.owner`.
    pub frame_code: usize,
    pub frame_previous: usize,
    pub frame_prev_instr: usize,
    pub frame_is_entry: usize,
    pub frame_owner: usize,
    pub frame_read: usize,
    /// `PyCodeObject.co_filename`, `.co_qualname`, `.co_firstlineno`, `.co_linetable`, `._co_code_adaptive`.
    pub code_filename: usize,
    pub code_qualname: usize,
    pub code_first_line: usize,
    pub code_linetable: usize,
    pub code_code: u64,
    pub code_read: usize,
}

/// CPython 3.11.
pub const V3_11: Layout = Layout {
    runtime_interpreters_head: 0x28,
    interp_threads_head: 0x10,
    tstate_next: 0x8,
    tstate_cframe: 0x38,
    tstate_native_thread_id: 0xa0,
    tstate_read: 0xa8,
    cframe_current_frame: 0x8,
    cframe_previous: 0x10,
    frame_code: 0x20,
    frame_previous: 0x30,
    frame_prev_instr: 0x38,
    frame_is_entry: 0x44,
    frame_owner: 0x45,
    frame_read: 0x48,
    code_filename: 0x70,
    code_qualname: 0x80,
    code_first_line: 0x48,
    code_linetable: 0x88,
    code_code: 0xb8,
    code_read: 0x90,
};

/// The layout of CPython `major.minor`, if rprof knows it.
pub fn of_version(major: u32, minor: u32) -> Option<&'static Layout> {
    match (major, minor) {
        (3, 11) => Some(&V3_11),
        _ => None,
    }
}

/// `PyASCIIObject.length`, `.state`, and where a compact string's characters start (ASCII / other).
pub const STR_LENGTH: usize = 0x10;
pub const STR_STATE: usize = 0x20;
pub const STR_ASCII_DATA: u64 = 48;
pub const STR_COMPACT_DATA: u64 = 72;
/// `PyBytesObject.ob_size` and `.ob_sval`.
pub const BYTES_SIZE: usize = 0x10;
pub const BYTES_DATA: u64 = 0x20;
