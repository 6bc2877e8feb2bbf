//! The live `rprof probe` suite (tests/probe_suite) with rprof's own choice of engine (the tracefs ring for private binaries, perf events for shared
//! libraries and -g, counters for --count).
const ENGINE: Option<&str> = None;
mod common;
include!("probe_suite/mod.rs");
