//! Bytes as a bpftrace program, through rprof bt's lexer, parser and checker.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rprof_fuzz::bt(data));
