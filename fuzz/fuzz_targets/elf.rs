//! Bytes as an ELF binary, through the calls report and probe make on one (see `rprof_fuzz::elf`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = rprof_fuzz::input_file("bin", data);
    rprof_fuzz::elf(&path);
});
