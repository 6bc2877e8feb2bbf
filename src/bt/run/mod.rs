//! The run pass: a small interpreter over the checked tree. Events come in one time order (the plan's probes
//! through `probe`'s engines and merge; BEGIN, END and `interval` blocks from the session); each runs its
//! blocks in program order: the predicate, then the statements, with maps and variables in rprof
//! ([`super::maps`]) and output as bpftrace prints it ([`super::print`], [`super::format`]).
//!
//! This module knows nothing of how events are read: an [`Event`] carries the context the kernel gave (the
//! thread, its process, command and CPU, the time), the values the plan fetched for the block
//! ([`super::values::ValueRef`]), and the stacks; symbols of other addresses come through [`Symbols`].
use super::value::{Frame, Sym, Value};
use super::values::ValueRef;
use std::io::Write;

/// How a program runs: bpftrace's flags and environment.
#[derive(Clone, Debug)]
pub struct Options {
    /// `$1`.. (`params[0]` is `$1`); `$#` is their number.
    pub params: Vec<String>,
    /// `BPFTRACE_STRLEN` (64).
    pub strlen: usize,
    /// `BPFTRACE_MAP_KEYS_MAX` (4096).
    pub map_keys_max: usize,
    /// `-f json`.
    pub format: super::print::OutputFormat,
    /// `-c CMD`: the child's pid (`cpid`).
    pub cpid: Option<u32>,
    /// `--unsafe`: `system()` may run.
    pub unsafe_ok: bool,
}

/// What a block asked for after running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `exit()` ran: the session stops probing, runs END and prints the maps.
    Exit,
}

/// Symbols of addresses (`usym()`, `ksym()`, stack frames not resolved by the session).
pub trait Symbols {
    /// The user symbol holding `addr` in process `pid`: its name and the offset in it.
    fn user(&self, pid: u32, addr: u64) -> Option<(String, u64)>;
    /// The kernel symbol holding `addr`.
    fn kernel(&self, addr: u64) -> Option<(String, u64)>;
}

/// No symbols (BEGIN, END and `interval` blocks, tests).
pub struct NoSymbols;

impl Symbols for NoSymbols {
    fn user(&self, _pid: u32, _addr: u64) -> Option<(String, u64)> {
        None
    }
    fn kernel(&self, _addr: u64) -> Option<(String, u64)> {
        None
    }
}

/// One hit of a probe, as the blocks attached to it see it.
pub struct Event<'a> {
    /// The blocks to run (indices into `Program::probes`), in program order.
    pub blocks: &'a [usize],
    /// `probe`: the attach point as bpftrace names it, wildcards expanded
    /// (`tracepoint:syscalls:sys_enter_openat`, `uprobe:/bin/bash:readline`).
    pub probe: &'a str,
    /// `func`: the probed function (uprobes), else empty.
    pub func: &'a str,
    /// CLOCK_MONOTONIC, ns (`nsecs`).
    pub time_ns: u64,
    /// The process (`pid`) and thread (`tid`); 0 in an interrupt.
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// `comm`, without its NUL.
    pub comm: &'a [u8],
    /// `uid`, `gid` (the plan asks for them only where the program reads them; else 0).
    pub uid: u32,
    pub gid: u32,
    /// The values the plan fetched for these blocks (every [`ValueRef`] of their predicates and statements;
    /// one missing here was not readable for this event: the runtime reads it as 0 or "").
    pub values: &'a [(ValueRef, Value)],
    /// The kernel and user stacks at the event, leaf first, where the blocks read `kstack`/`ustack`.
    pub kstack: Option<&'a [Frame]>,
    pub ustack: Option<&'a [Frame]>,
    pub symbols: &'a dyn Symbols,
}

impl Event<'_> {
    /// The value fetched for `r`.
    pub fn value(&self, r: &ValueRef) -> Option<&Value> {
        self.values.iter().find(|(k, _)| k == r).map(|(_, v)| v)
    }

    /// A `usym()`/`ksym()` value of `addr`.
    pub fn sym(&self, kind: super::value::StackKind, addr: u64) -> Sym {
        let name = match kind {
            super::value::StackKind::User => self.symbols.user(self.pid, addr),
            super::value::StackKind::Kernel => self.symbols.kernel(addr),
        };
        Sym {
            kind,
            addr,
            pid: self.pid,
            name: name.map(|(n, _)| n),
        }
    }
}

/// Where a runtime writes: `out` is bpftrace's standard output (printf, print, maps at exit; `-o FILE`),
/// `err` its standard error (warnings such as a full map's).
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
}

mod builtins;
mod calls;
mod eval;
mod exec;
mod funcs;
mod runtime;
mod setup;
#[cfg(test)]
mod tests;

pub use runtime::Runtime;
