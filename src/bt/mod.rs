//! `rprof bt`: bpftrace's language without BPF (issue 42). The runtime's data and output, pure and
//! unit-tested; this module reaches neither `perf/` nor `tracefs/`.
//!
//! - [`value`]: runtime values (integers by type, strings, tuples, stacks, symbols, inet, timestamps).
//! - [`inet`]: `ntop()` addresses as glibc's `inet_ntop` spells them.
//! - [`maps`]: maps in user space: plain values and the aggregations, with bpftrace's key limit.
//! - [`print`]: output exactly as bpftrace 0.17 prints it (text and `-f json`).
//! - [`format`]: `printf` and `join` as bpftrace 0.17 formats them.
//! - [`strftime`]: `time()` and `strftime()`: C's strftime in the C locale, with bpftrace's `%f`.
pub mod format;
pub mod inet;
pub mod maps;
pub mod print;
pub mod strftime;
pub mod value;
