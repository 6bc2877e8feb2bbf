//! Python functions in native stacks: CPython's own state read from a running process (`process_vm_readv`, no
//! ptrace stop), as py-spy does.
//!
//! [`detect`] finds the interpreter a process runs (its binary or libpython, `_PyRuntime` among the dynamic
//! symbols, the version in `Py_Version`), [`Runtime::stack`] reads one thread's chain of interpreter frames
//! (`_PyRuntime.interpreters.head->threads.head`, the thread whose `native_thread_id` is the tid, its
//! `cframe->current_frame` (3.11, 3.12) or `current_frame` (3.13), then `previous`), naming each `qualname
//! (file.py:line)` from its code object ([`code`]) and the line table ([`linetable`]). [`layout`] holds the
//! offsets of 3.11 and 3.12; 3.13's come from the process ([`debug_offsets`]). Another version is reported as
//! such and read no further.
pub mod code;
pub mod debug_offsets;
pub mod interpreter;
pub mod layout;
pub mod linetable;
pub mod memory;
pub mod recheck;
pub mod threads;

#[cfg(test)]
mod live_tests;

use crate::process;
use interpreter::{file_name, read_symbols, version_of_name};
pub use interpreter::{is_python_file, version_of_file};
use layout::{Current, Layout, Reader};
use memory::{u64_at, Memory, ReadError};
use recheck::Words;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// Why a thread's Python stack could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PythonError {
    #[error("reading the interpreter's memory: {0}")]
    Read(#[from] ReadError),
    /// No `PyThreadState` has this OS thread id (a thread that never ran Python, or one that just ended).
    #[error("no Python thread state for thread {0}")]
    NoThread(u32),
}

/// One Python frame, as py-spy prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyFrame {
    /// `qualname (file.py:line)`.
    pub name: Arc<str>,
    /// The frame is the first one an invocation of `_PyEval_EvalFrameDefault` ran (3.11's `is_entry`; 3.12
    /// and later: the next frame is the evaluator's shim on the C stack): the frames from the leaf down to it
    /// were run by one C frame of the evaluator.
    pub entry: bool,
}

/// One thread's Python stack, read at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyStack {
    /// Leaf first; empty when the thread had no Python frame.
    pub frames: Vec<PyFrame>,
    /// Where the thread's `_PyCFrame` is (on its C stack; 0 in 3.13, which has none), and the interpreter
    /// frame the thread ran.
    pub cframe: u64,
    pub current_frame: u64,
    /// The address of the outermost Python frame (0 without frames).
    pub outermost: u64,
    /// How the stack read relates to the sampled instant.
    pub sampled: Sampled,
    /// The chain changed under two reads in a row: the frames may be of two stacks (see [`recheck`]).
    pub torn: bool,
}

/// How a stack read after a sample relates to the sample, when the sample's stack copy holds the thread's
/// `_PyCFrame` (whose `current_frame` is the interpreter frame the thread ran at the sample).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sampled {
    /// No stack copy (or it does not hold the `_PyCFrame`): the stack as read.
    #[default]
    Unknown,
    /// The thread still ran the sampled frame: the stack is the sampled one.
    Same,
    /// The thread had called further: the stack read from the sampled frame down is the sampled one.
    Deeper,
    /// The thread had returned from the sampled frame: the stack is the one it runs at the read (the sampled
    /// frame's memory may hold another frame since, so it is not followed).
    MovedOn,
}

/// What a sample copied of its thread (DWARF mode): the user stack from `sp` up and the general registers.
/// The evaluator keeps its instruction pointer (`next_instr`) live across every call it makes, in a register
/// or its C frame, so the copy points into the code the sampled frame ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct SampleCopy<'a> {
    pub sp: u64,
    pub stack: &'a [u8],
    pub regs: &'a [u64],
}

impl SampleCopy<'_> {
    /// The word at `addr`, when the copy holds it.
    fn word(&self, addr: u64) -> Option<u64> {
        let at = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let bytes = self.stack.get(at..at.checked_add(8)?)?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?))
    }

    /// Whether a register or an aligned word of the stack copy lies in `code` (a code object's instructions).
    fn points_into(&self, code: &std::ops::Range<u64>) -> bool {
        let words = self.stack.chunks_exact(8).map(|w| {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            u64::from_ne_bytes(b)
        });
        self.regs
            .iter()
            .copied()
            .chain(words)
            .any(|w| code.contains(&w))
    }
}

/// What a process runs.
pub enum Detected {
    NotPython,
    Python(Box<Runtime>),
    /// CPython of a version whose layout rprof does not know (`3.14.0`), or whose debug offsets it did not
    /// take (`3.13.0: a free-threaded build ...`).
    Unsupported(String),
}

/// The interpreter of one process.
pub struct Runtime {
    mem: Memory,
    layout: Layout,
    /// `major.minor.micro`.
    pub version: String,
    /// The runtime address of `_PyRuntime`.
    runtime: u64,
    /// Where `_PyEval_EvalFrameDefault` runs (empty when the binary does not export it).
    pub eval: Range<u64>,
    /// The runtime address of `PyCode_Type` (0 when the binary does not export it).
    code_type: u64,
    /// tid -> its `PyThreadState` (as last found).
    threads: HashMap<u32, u64>,
    /// `sys.modules` (its address, `ma_keys`, `dk_nentries`) when a look found no `threading` in it.
    modules_without_threading: Option<(u64, (u64, u64))>,
    codes: code::Codes,
}

/// Find the CPython interpreter process `pid` runs: the libpython it maps, else its python binary.
pub fn detect(pid: u32) -> Detected {
    let Ok(maps) = process::maps(pid as i32) else {
        return Detected::NotPython;
    };
    let mut candidates: Vec<&str> = maps
        .iter()
        .map(|m| m.path.as_str())
        .filter(|p| is_python_file(p))
        .collect();
    candidates.sort_by_key(|p| !file_name(p).starts_with("libpython"));
    candidates.dedup();
    for path in candidates {
        let Some((syms, layout)) = read_symbols(pid, path) else {
            continue;
        };
        let Some(first) = maps
            .iter()
            .filter(|m| m.path == path)
            .min_by_key(|m| m.offset)
        else {
            continue;
        };
        let bias = layout.bias(first.start, first.offset);
        let mem = Memory::new(pid);
        let version = match syms.version {
            Some(v) => mem.u64(bias.wrapping_add(v)).map(|v| v as u32).ok(),
            None => None,
        };
        let (major, minor, micro) = match version {
            Some(v) => (v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff),
            None => match version_of_name(path) {
                Some((major, minor)) => (major, minor, 0),
                None => continue,
            },
        };
        let version = format!("{major}.{minor}.{micro}");
        let runtime = bias.wrapping_add(syms.runtime);
        let layout = match layout::of_version(major, minor) {
            Some(Reader::Table(layout)) => *layout,
            Some(Reader::DebugOffsets) => match mem
                .bytes(runtime, debug_offsets::SIZE_3_13)
                .map_err(|e| e.to_string())
                .and_then(|b| debug_offsets::layout_3_13(&b).map_err(|e| e.to_string()))
            {
                Ok(layout) => layout,
                Err(why) => return Detected::Unsupported(format!("{version}: {why}")),
            },
            None => return Detected::Unsupported(version),
        };
        let eval = syms.eval.map_or(0..0, |(a, size)| {
            bias.wrapping_add(a)..bias.wrapping_add(a + size)
        });
        return Detected::Python(Box::new(Runtime {
            mem,
            layout,
            version,
            runtime,
            eval,
            code_type: syms.code_type.map_or(0, |a| bias.wrapping_add(a)),
            threads: HashMap::new(),
            modules_without_threading: None,
            codes: code::Codes::default(),
        }));
    }
    Detected::NotPython
}

/// Where the addresses of Python frames start in a recording's callchains: not a canonical x86-64 address (nor
/// one of 5-level paging), so never code's. Frame `i` of the recording's PYTHON section is at
/// `PYTHON_FRAMES + 16 * i + 8`, so that a return address looked up one byte back still names it.
pub const PYTHON_FRAMES: u64 = 0x5079_0000_0000_0000;
const PYTHON_FRAMES_END: u64 = 0x507a_0000_0000_0000;

/// Added to the address of the innermost Python frame of a stack read after the thread had returned from the
/// sampled frame ([`Sampled::MovedOn`]): the frame keeps its name (the address stays in its 16-byte slot), and
/// `rprof script`, which prints addresses, shows which samples' Python stacks were read late (`...c`, not `...8`).
pub const STALE_MARK: u64 = 4;

/// The callchain address of the recording's Python frame number `index`.
pub fn frame_addr(index: usize) -> u64 {
    PYTHON_FRAMES + 16 * index as u64 + 8
}

/// The Python frame number of a callchain address (None for any other address).
pub fn frame_index(addr: u64) -> Option<usize> {
    (PYTHON_FRAMES..PYTHON_FRAMES_END)
        .contains(&addr)
        .then(|| ((addr - PYTHON_FRAMES) / 16) as usize)
}

/// The names of the Python frames of a recording session, by number (see [`frame_addr`]): filled by `record`
/// as it meets them, read by whoever names frames meanwhile (`--push`'s profile thread) or after (the recording's
/// PYTHON section).
#[derive(Clone, Default)]
pub struct Names(Arc<std::sync::RwLock<Vec<Arc<str>>>>);

impl Names {
    pub fn from_vec(names: Vec<Arc<str>>) -> Names {
        Names(Arc::new(std::sync::RwLock::new(names)))
    }

    /// Frame number `index`'s name.
    pub fn get(&self, index: usize) -> Option<Arc<str>> {
        self.0.read().ok()?.get(index).cloned()
    }

    /// Add a name; returns its number.
    pub fn push(&self, name: Arc<str>) -> usize {
        let mut names = self.0.write().unwrap_or_else(|e| e.into_inner());
        names.push(name);
        names.len() - 1
    }

    pub fn to_vec(&self) -> Vec<Arc<str>> {
        self.0.read().map(|n| n.clone()).unwrap_or_default()
    }
}

/// The most frames read from one thread (a deeper stack is cut there).
const MAX_DEPTH: usize = 512;
/// The most `_PyCFrame`s followed back to the one a sample's stack copy holds.
const MAX_CFRAMES: usize = 64;
/// The most thread states walked looking for a thread.
const MAX_THREADS: usize = 4096;
/// The most interpreters walked looking for the main one.
const MAX_INTERPRETERS: usize = 256;

impl Runtime {
    /// The Python stack of OS thread `tid`, read now. `copy` is what the sample copied of the thread (when it
    /// did): the value its `_PyCFrame.current_frame` held at the sample, when the copy holds that field, is the
    /// sampled frame; when the thread has called further since, the stack is cut to start at that frame (see
    /// [`Sampled`]). A frame at the sampled frame's address that runs code the copy does not point into is
    /// another call's (the data stack reuses a returned frame's memory): [`Sampled::MovedOn`]. A chain
    /// that changed under the read ([`recheck`]) is read once more; when it changed under that read too, the
    /// stack is [`PyStack::torn`] (and [`Sampled::MovedOn`] when the sampled frame is known).
    pub fn stack(
        &mut self,
        tid: u32,
        copy: Option<&SampleCopy<'_>>,
    ) -> Result<PyStack, PythonError> {
        let mem = self.mem;
        let (mut stack, held) = recheck::settled(&mem, || self.read_stack(tid, copy))?;
        if !held {
            stack.torn = true;
            if stack.sampled != Sampled::Unknown {
                stack.sampled = Sampled::MovedOn;
            }
        }
        Ok(stack)
    }

    /// One read of the stack of `tid` (see [`Runtime::stack`]), and the words it went by.
    fn read_stack(
        &mut self,
        tid: u32,
        copy: Option<&SampleCopy<'_>>,
    ) -> Result<(PyStack, Words), PythonError> {
        let l = self.layout;
        let tstate = self.thread_state(tid)?;
        let buf = self.mem.bytes(tstate, l.tstate_read)?;
        let mut words = Words::default();
        let (cframe, current) = match l.current {
            Current::CFrame {
                tstate_cframe,
                current_frame,
                ..
            } => match words.saw(tstate + tstate_cframe as u64, u64_at(&buf, tstate_cframe)) {
                0 => (0, 0),
                c => (
                    c,
                    words.saw(c + current_frame, self.mem.u64(c + current_frame)?),
                ),
            },
            Current::Direct {
                tstate_current_frame,
            } => {
                let at = tstate + tstate_current_frame as u64;
                (0, words.saw(at, u64_at(&buf, tstate_current_frame)))
            }
        };
        let mut stack = PyStack {
            frames: Vec::new(),
            cframe,
            current_frame: current,
            outermost: 0,
            sampled: Sampled::Unknown,
            torn: false,
        };
        let copy = copy.filter(|c| !c.stack.is_empty());
        let sampled_frame = copy.and_then(|c| self.sampled_frame(cframe, c));
        let addrs = self.frames(current, &mut stack.frames, &mut words)?;
        stack.outermost = addrs.last().map_or(0, |&(frame, _)| frame);
        if let (Some(at), Some(copy)) = (sampled_frame, copy) {
            let found = addrs.iter().position(|&(frame, _)| frame == at);
            // The same address, but code the sample's copy does not point into: another call's frame.
            let same_code = |i: usize| {
                let code = addrs[i].1;
                self.codes
                    .instructions(code, &self.layout)
                    .is_none_or(|r| copy.points_into(&r))
            };
            stack.sampled = match found {
                Some(i) if !same_code(i) => Sampled::MovedOn,
                Some(0) => Sampled::Same,
                Some(i) => {
                    stack.frames.drain(..i);
                    Sampled::Deeper
                }
                None => Sampled::MovedOn,
            };
        }
        Ok((stack, words))
    }

    /// Read the chain of interpreter frames from `frame` outward into `frames` (leaf first); returns the
    /// address of each. 3.12 and later put a shim frame (owner [`layout::FRAME_OWNED_BY_CSTACK`], no Python
    /// function's) on the C stack at the start of each evaluator call: it is left out, and marks the frame
    /// before it as the call's entry frame. Each frame's `previous`, code and (but the leaf's) instruction go
    /// into `words`. Returns each frame's address and code object.
    fn frames(
        &mut self,
        mut frame: u64,
        frames: &mut Vec<PyFrame>,
        words: &mut Words,
    ) -> Result<Vec<(u64, u64)>, PythonError> {
        let l = self.layout;
        let mut addrs = Vec::new();
        let mut steps = 0;
        while frame != 0 && frames.len() < MAX_DEPTH && steps < 2 * MAX_DEPTH {
            steps += 1;
            let f = self.mem.bytes(frame, l.frame_read)?;
            let mut saw = |at: usize| words.saw(frame + at as u64, u64_at(&f, at));
            let previous = saw(l.frame_previous);
            let code = saw(l.frame_code);
            // The leaf's instruction moves as it runs; an outer frame's holds while its callee runs.
            let instr = match steps {
                1 => u64_at(&f, l.frame_instr),
                _ => saw(l.frame_instr),
            };
            let entry = match l.frame_is_entry {
                Some(at) => f[at] != 0,
                None if f[l.frame_owner] == layout::FRAME_OWNED_BY_CSTACK => {
                    if let Some(last) = frames.last_mut() {
                        last.entry = true;
                    }
                    frame = previous;
                    continue;
                }
                None => false,
            };
            let name = self
                .codes
                .frame_name(&self.mem, &l, code, instr, self.code_type)?;
            frames.push(PyFrame { name, entry });
            addrs.push((frame, code));
            frame = previous;
        }
        Ok(addrs)
    }

    /// The interpreter frame the thread ran at the sample: the `current_frame` the sample's stack copy holds
    /// of the innermost `_PyCFrame` in the copy. When the thread has entered the evaluator again
    /// since (a C call back into Python: `sorted`'s key, a generator), its `cframe` lies below the copied
    /// stack: its `previous` chain leads back to the sampled one. None in 3.13 (no `_PyCFrame`).
    fn sampled_frame(&self, cframe: u64, copy: &SampleCopy<'_>) -> Option<u64> {
        let Current::CFrame {
            current_frame,
            previous,
            ..
        } = self.layout.current
        else {
            return None;
        };
        let mut c = cframe;
        for _ in 0..MAX_CFRAMES {
            if c == 0 {
                return None;
            }
            if let Some(frame) = copy.word(c + current_frame) {
                return Some(frame);
            }
            c = self.mem.u64(c + previous).ok()?;
        }
        None
    }

    /// The `PyThreadState` of `tid`: the one found last time if it still is that thread's, else found anew.
    fn thread_state(&mut self, tid: u32) -> Result<u64, PythonError> {
        let l = self.layout;
        if let Some(&t) = self.threads.get(&tid) {
            let buf = self.mem.bytes(t, l.tstate_read)?;
            if u64_at(&buf, l.tstate_native_thread_id) == u64::from(tid) {
                return Ok(t);
            }
        }
        self.threads.clear();
        let mut interp = self.mem.u64(self.runtime + l.runtime_interpreters_head)?;
        let mut seen = 0;
        while interp != 0 && seen < MAX_THREADS {
            let mut t = self.mem.u64(interp + l.interp_threads_head)?;
            while t != 0 && seen < MAX_THREADS {
                seen += 1;
                let buf = self.mem.bytes(t, l.tstate_read)?;
                let native = u64_at(&buf, l.tstate_native_thread_id) as u32;
                self.threads.insert(native, t);
                t = u64_at(&buf, l.tstate_next);
            }
            seen += 1;
            interp = self.mem.u64(interp + l.interp_next)?;
        }
        self.threads
            .get(&tid)
            .copied()
            .ok_or(PythonError::NoThread(tid))
    }

    /// The `threading` name of a thread whose stack is `stack` (read whole: its outermost frame is the thread's
    /// first), when `threading` started it (see [`threads`]).
    pub fn thread_name(&self, stack: &PyStack) -> Option<String> {
        let outermost = stack.frames.last()?;
        let l = &self.layout;
        threads::thread_name(
            &self.mem,
            &l.thread_names,
            &l.str,
            stack.outermost,
            &outermost.name,
        )
    }

    /// The `threading` name of the process's main thread (see [`threads::main_thread_name`]), read in the main
    /// interpreter: the last of the list (each new one is added at its head). None when the script did not
    /// import `threading` (yet), or a read failed. `sys.modules` is looked through again only when it changed
    /// since a look that found no `threading` (two reads when it did not).
    pub fn main_thread_name(&mut self) -> Option<String> {
        let l = &self.layout;
        let mut interp = self
            .mem
            .u64(self.runtime + l.runtime_interpreters_head)
            .ok()?;
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 {
                return None;
            }
            let next = self.mem.u64(interp + l.interp_next).ok()?;
            if next != 0 {
                interp = next;
                continue;
            }
            let modules = self.mem.u64(interp + l.interp_modules).ok()?;
            let shape = (modules, threads::dict_shape(&self.mem, modules).ok()?);
            if self.modules_without_threading == Some(shape) {
                return None;
            }
            return match threads::main_thread_name(&self.mem, &l.thread_names, &l.str, modules) {
                threads::MainThread::Named(name) => Some(name),
                threads::MainThread::NoThreading => {
                    self.modules_without_threading = Some(shape);
                    None
                }
                threads::MainThread::Unknown => None,
            };
        }
        None
    }

    /// Whether the thread's current frame is found through a `_PyCFrame` on its C stack (3.11, 3.12), which a
    /// sample's stack copy holds; 3.13 keeps it in the thread state only.
    pub fn cframe_on_stack(&self) -> bool {
        matches!(self.layout.current, Current::CFrame { .. })
    }

    /// Forget the code objects read (a long session: they are read again when met).
    pub fn forget_code(&mut self) {
        self.codes = code::Codes::default();
    }
}

#[cfg(test)]
mod tests;
