//! The live `rprof probe` suite (tests/probe_suite) with every probe event on the tracefs instance ring.
const ENGINE: Option<&str> = Some("tracefs");
mod common;
include!("probe_suite/mod.rs");
