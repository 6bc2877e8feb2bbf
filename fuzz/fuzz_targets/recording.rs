//! Bytes as a recording (perf.data), opened and read to the end or the first error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = rprof_fuzz::input_file("perf.data", data);
    rprof_fuzz::recording(&path);
});
