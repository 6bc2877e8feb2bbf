//! Bytes as a perf map (`/tmp/perf-PID.map`), parsed and looked up.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rprof_fuzz::perf_map(data));
