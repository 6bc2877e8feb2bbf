//! Bytes as a kallsyms text, parsed and looked up.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rprof_fuzz::kallsyms(data));
