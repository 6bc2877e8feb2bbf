//! rprof: a Linux profiler built on perf_event_open, tracefs and the perf ring buffers.
//!
//! Pipeline stages, one module each (dependencies flow downwards in this list):
//! - [`addr`]: typed addresses (runtime, file offset, ELF virtual address).
//! - [`perf`]: perf_event_open, ioctls, mmap ring buffers, time-ordered merge. The only unsafe code.
//! - [`tracefs`]: find/mount tracefs, create and remove probe events.
//! - [`process`]: /proc parsers (maps, tasks, comm) and the one per-process address-space model.
//! - [`symbols`]: kallsyms, ELF, DWARF, debug files, perf maps, demangling.
//! - [`unwind`]: frame-pointer callchains and DWARF unwinding.
//! - [`recording`]: the perf.data (PERFILE2) writer and reader.
//! - [`record`]: `rprof record`, sampling into a recording.
//! - [`report`]: `rprof report`, the one stack resolver (also used by `probe -g`), tables, folded stacks, flame graphs.
//! - [`probe`]: `rprof probe`, exact function counts and durations.
pub mod addr;
pub mod perf;
pub mod probe;
pub mod process;
pub mod record;
pub mod recording;
pub mod report;
pub mod symbols;
pub mod tracefs;
pub mod unwind;
