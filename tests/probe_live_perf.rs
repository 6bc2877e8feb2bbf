//! The live `rprof probe` suite (tests/probe_suite) with every probe event on perf events.
const ENGINE: Option<&str> = Some("perf");
mod common;
include!("probe_suite/mod.rs");
