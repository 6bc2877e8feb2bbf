//! rprof: a Linux profiler built on perf_event_open, tracefs and the perf ring buffers.
//!
//! Pipeline stages, one module each (dependencies flow downwards in this list):
//! - [`addr`]: typed addresses (runtime, file offset, ELF virtual address).
//! - [`regs`]: the user registers of a sample (below the recording and the unwinder).
//! - [`elf_layout`]: an ELF file's PT_LOAD segments: load bias, file offsets, ELF addresses.
//! - [`buildid`]: build ids, the build-id cache, the running kernel's and vDSO's facts.
//! - [`merge`]: the time-ordered merge of records from several buffers (a generic sort).
//! - [`tracefs`]: find/mount tracefs, create and remove probe events, instances, the ftrace ring-buffer page
//!   format.
//! - [`perf`]: perf_event_open, ioctls, mmap ring buffers (perf's and ftrace's), the event set and its run loop.
//!   Unsafe code lives here and in [`mapped`].
//! - [`mapped`]: files mapped read-only (memmap2), below the symbolizer and the unwinder.
//! - [`process`]: /proc parsers (maps, tasks, comm) and the one per-process address-space model.
//! - [`symbols`]: kallsyms, ELF, DWARF, debug files, perf maps, demangling.
//! - [`unwind`]: frame-pointer callchains and DWARF unwinding.
//! - [`recording`]: the perf.data (PERFILE2) writer and reader.
//! - [`events`]: the event layer: perf's event-list grammar and the plan of what the kernel opens (attrs,
//!   tracepoint ids, probe points), below record and stat.
//! - [`python`]: CPython's frames read from a running process (versions, layouts, code objects, line tables).
//! - [`record`]: `rprof record`, sampling into a recording.
//! - [`stat`]: `rprof stat`, counting events as perf stat counts and prints them.
//! - [`resolve`]: the one stack resolver (callchains to interned frames), shared by report, script, annotate and
//!   probe.
//! - [`replay`]: reading a recording as every reader does (the resolver set up from it, streamed events).
//! - [`text`]: numbers as the reports print them.
//! - [`report`]: `rprof report` and `rprof script`: tables, folded stacks, flame graphs, exports.
//! - [`annotate`]: `rprof annotate`, the source lines and instructions of hot functions (iced-x86).
//! - [`probe`]: `rprof probe`, exact function counts and durations.
//! - [`bt`]: `rprof bt`, bpftrace's language without BPF: parse, check (plan, run not built yet), and the
//!   runtime's values, maps in user space and bpftrace's output.
//!
//! `unsafe` code is denied everywhere but in [`perf`], [`mapped`] and [`dl`] (and the lint enforces it).
#![deny(unsafe_code)]
pub mod addr;
pub mod annotate;
pub mod bt;
pub mod buildid;
#[allow(unsafe_code)]
pub mod dl;
pub mod elf_layout;
pub mod events;
#[allow(unsafe_code)]
pub mod mapped;
pub mod merge;
#[allow(unsafe_code)]
pub mod perf;
pub mod probe;
pub mod process;
pub mod push;
pub mod python;
pub mod record;
pub mod recording;
pub mod regs;
pub mod replay;
pub mod report;
pub mod resolve;
pub mod stat;
pub mod symbols;
pub mod text;
pub mod tools;
pub mod top;
pub mod tracefs;
pub mod unwind;
